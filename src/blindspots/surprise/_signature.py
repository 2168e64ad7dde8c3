"""One declared signature per compiled kernel, from which both sides of its packed int64 argument array are made.

A kernel run on torch's OpenMP threads (``_omp.run``) is a numba ``cfunc(void(voidptr))``: its arguments
travel as one int64 array. ``KernelSignature`` names the arguments in order, each an ``Array`` (dtype and
dimension names) or a ``Scalar`` (int64 or bool), and computes every slot offset once. From it come:

- ``pack(**arrays)`` (Python): checks every argument (given exactly once; dtype, ndim, C-contiguity, and
  that a dimension named twice has one size) and writes the array;
- ``driver(kernel)`` (numba): a generated ``njit`` function that checks the header, reads each argument at
  the offsets computed here, and calls ``kernel(*arguments, i)`` for every chunk i it takes from the counter;
  a ``cfunc`` that calls it (``@trampoline(signature)``) is what ``_omp.run`` runs.
  ``print(signature.source())`` shows the generated code.

Layout of a packed array: the header (``_omp.HEADER`` slots: counter, chunks, slot count, fingerprint,
status), then per argument in order: an array's address and its shape (1 + ndim slots), or a scalar (1 slot).

Why the header carries the slot count and a fingerprint (of the layout and of this file): the driver
compares both with the values it was compiled with and, on a mismatch, writes ``STATUS`` and runs nothing
(``_omp.run`` then raises) instead of reading memory at other offsets. That catches arguments packed for
another kernel, and trampolines that numba's disk cache keeps from before an edit of this file (numba checks
the source file of the cached function only): ``trampoline`` finds those at import and compiles them again.
"""
from __future__ import annotations

import ctypes
import zlib
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core.caching import FunctionCache
from numba.extending import intrinsic

from blindspots.surprise._omp import CHUNKS, COUNTER, FINGERPRINT, HEADER, SLOTS, STATUS

_BOOL, _INT64 = "bool", "int64"
_DTYPES = {"float32": types.float32, "int64": types.int64, "int32": types.int32, "uint8": types.uint8}


@dataclass(frozen=True)
class Array:
    """A C-contiguous array argument: its dtype (a key of ``_DTYPES``) and one name per dimension, e.g.
    ``"n H W"``. A name used by several arguments (or twice in one) is one size; a number is that size."""

    dtype: str
    dims: str

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype: expected one of {sorted(_DTYPES)}, got {self.dtype!r}")
        if not self.dims.split() or not all(d.isidentifier() or d.isdigit() for d in self.dims.split()):
            raise ValueError(f"dims: expected dimension names or sizes separated by spaces, got {self.dims!r}")

    @property
    def names(self) -> list[str]:
        return self.dims.split()

    @property
    def slots(self) -> int:
        return 1 + len(self.names)


@dataclass(frozen=True)
class Scalar:
    """A scalar argument: ``"int64"`` (e.g. an address) or ``"bool"`` (a flag; packed as 0 / 1)."""

    kind: str

    def __post_init__(self) -> None:
        if self.kind not in (_BOOL, _INT64):
            raise ValueError(f"kind: expected 'int64' or 'bool', got {self.kind!r}")

    slots = 1


INT64, BOOL = Scalar(_INT64), Scalar(_BOOL)
_TRAMPOLINE = types.void(types.voidptr)
#: names the generated driver uses itself (``source``): an argument of one of these names would hide it
_DRIVER_NAMES = frozenset({"a", "i", "data", "carray", "int64_slots", "next_chunk", "kernel"})

# the generator's own source is part of every fingerprint: an edit of this file changes them all
_SELF = zlib.crc32(Path(__file__).read_bytes())


class KernelSignature:
    """The ordered arguments of one per-chunk kernel; `chunks` names the dimension split into chunks.

    Example: ``KernelSignature("scale_rows", "n", x=Array("float32", "n d"), by=Array("float32", "n"))``
    packs ``pack(x=x, by=by)`` into 5 + 3 + 2 slots, with ``x.shape[0]`` chunks.
    """

    def __init__(self, name: str, chunks: str, **arguments: Array | Scalar) -> None:
        self.name = name
        self.arguments = dict(arguments)
        dims = {d for a in arguments.values() if isinstance(a, Array) for d in a.names}
        if chunks not in dims:
            raise ValueError(f"chunks: expected a dimension name of {name}'s arrays {sorted(dims)}, got {chunks!r}")
        self.chunks = chunks
        self.offsets: dict[str, int] = {}
        slot = HEADER
        for arg, spec in arguments.items():
            if not isinstance(spec, (Array, Scalar)):
                raise ValueError(f"{arg}: expected an Array or a Scalar, got {spec!r}")
            if arg in _DRIVER_NAMES or arg.startswith("address_as_"):
                raise ValueError(f"{arg}: expected an argument name other than the driver's own "
                                 f"{sorted(_DRIVER_NAMES)}, got {arg!r}")
            self.offsets[arg] = slot
            slot += spec.slots
        self.slots = slot
        # for pack: (name, np.dtype / bool / None for int64, ndim) per argument; the slots of sizes that must
        # be equal (a dimension name's first slot, each later one) and of fixed sizes (slot, size)
        self._plan = [(arg, np.dtype(spec.dtype), len(spec.names)) if isinstance(spec, Array)
                      else (arg, bool if spec.kind == _BOOL else None, 0) for arg, spec in self.arguments.items()]
        firsts: dict[str, int] = {}
        same, fixed = [], []
        for arg, spec in self.arguments.items():
            for axis, dim in enumerate(spec.names if isinstance(spec, Array) else ()):
                at = self.offsets[arg] + 1 + axis
                if dim.isdigit():
                    fixed.append((at, int(dim)))
                elif dim in firsts:
                    same.append((firsts[dim], at))
                else:
                    firsts[dim] = at
        self._same, self._fixed = tuple(same), tuple(fixed)
        self._chunk_slot = firsts[chunks]
        self.fingerprint = zlib.crc32(repr((name, chunks, tuple(self.arguments.items()))).encode(), _SELF)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        return f"KernelSignature({self.name!r}, chunks={self.chunks!r}, {args}; {self.slots} slots)"

    # ---- Python side ----
    def pack(self, **given: np.ndarray | int | bool) -> np.ndarray:
        """int64 [slots] argument array of `given` (every declared argument, by name, exactly once). Arrays
        must stay alive, unmoved, until the kernel has run. ValueError naming the argument on a mismatch."""
        # checked in microseconds (a fused map takes about a millisecond): plain comparisons per argument,
        # then the dimension sizes on the packed slots; on any failure ``_explain`` checks again, argument by
        # argument, for the message
        if given.keys() != self.arguments.keys():
            self._explain(given)
        out = [0, 0, self.slots, self.fingerprint, 0]
        for arg, dtype, ndim in self._plan:
            value = given[arg]
            if dtype is None:  # an int64 scalar
                ok = type(value) is int and -2**63 <= value < 2**63
                out.append(value if ok else self._scalar(arg, self.arguments[arg], value))
            elif dtype is bool:
                out.append(int(value) if type(value) is bool else self._scalar(arg, self.arguments[arg], value))
            else:
                if (not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != ndim
                        or not value.flags.c_contiguous):
                    self._explain(given)
                out.append(value.ctypes.data)
                out.extend(value.shape)
        for i, j in self._same:
            if out[i] != out[j]:
                self._explain(given)
        for i, size in self._fixed:
            if out[i] != size:
                self._explain(given)
        out[CHUNKS] = out[self._chunk_slot]
        return np.array(out, dtype=np.int64)

    def _explain(self, given: dict[str, object]) -> None:
        """Raise the ValueError naming the first argument of `given` that does not match the signature."""
        missing = [k for k in self.arguments if k not in given]
        extra = [k for k in given if k not in self.arguments]
        if missing or extra:
            raise ValueError(f"{self.name}: expected arguments {list(self.arguments)}, got missing {missing}, "
                             f"unexpected {extra}")
        sizes: dict[str, tuple[int, str]] = {}  # dimension name -> (size, the argument that set it)
        for arg, spec in self.arguments.items():
            if isinstance(spec, Scalar):
                self._scalar(arg, spec, given[arg])
            else:
                self._check_array(arg, spec, given[arg], sizes)
        raise AssertionError(f"{self.name}: pack and _explain disagree on {given}")  # unreachable

    def _scalar(self, arg: str, spec: Scalar, value: object) -> int:
        if spec.kind == _BOOL:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"{self.name}: {arg}: expected a bool, got {type(value).__name__} {value!r}")
            return int(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{self.name}: {arg}: expected an int64 integer, got {type(value).__name__} {value!r}")
        if not -2**63 <= int(value) < 2**63:
            raise ValueError(f"{self.name}: {arg}: expected an int64 integer, got {value} (out of range)")
        return int(value)

    def _check_array(self, arg: str, spec: Array, value: object, sizes: dict[str, tuple[int, str]]) -> None:
        want = f"a C-contiguous {spec.dtype} array [{', '.join(spec.names)}]"
        if not isinstance(value, np.ndarray):
            raise ValueError(f"{self.name}: {arg}: expected {want}, got {type(value).__name__}")
        if value.dtype != np.dtype(spec.dtype) or value.ndim != len(spec.names):
            raise ValueError(f"{self.name}: {arg}: expected {want}, got {value.dtype} of shape {value.shape}")
        if not value.flags.c_contiguous:
            raise ValueError(f"{self.name}: {arg}: expected {want}, got strides {value.strides} for shape "
                             f"{value.shape}")
        for axis, (dim, size) in enumerate(zip(spec.names, value.shape)):
            if dim.isdigit():
                if size != int(dim):
                    raise ValueError(f"{self.name}: {arg}: expected {want}, got shape {value.shape}")
            elif dim not in sizes:
                sizes[dim] = (size, arg)
            elif sizes[dim][0] != size:
                size0, by = sizes[dim]
                raise ValueError(f"{self.name}: {arg}: expected dimension {axis} ({dim}) of size {size0} as in "
                                 f"{by}, got shape {value.shape}")

    # ---- numba side ----
    def source(self, kernel_name: str = "kernel") -> str:
        """Python source of the driver of ``driver(kernel)``: the header check, the arguments read at their
        offsets, the chunk loop."""
        reads = []
        for arg, spec in self.arguments.items():
            o = self.offsets[arg]
            if isinstance(spec, Scalar):
                reads.append(f"    {arg} = a[{o}] != 0" if spec.kind == _BOOL else f"    {arg} = a[{o}]")
            else:
                shape = ", ".join(f"a[{o + 1 + j}]" for j in range(len(spec.names)))
                shape += "," if len(spec.names) == 1 else ""
                reads.append(f"    {arg} = carray(address_as_{spec.dtype}(a[{o}]), ({shape}))")
        call = ", ".join(self.arguments)
        return "\n".join([
            f"def drive_{self.name}(data):",
            f"    a = carray(int64_slots(data), {self.slots})",
            f"    if a[{SLOTS}] != {self.slots} or a[{FINGERPRINT}] != {self.fingerprint}:",
            f"        a[{STATUS}] = 1  # packed for another layout: run nothing",
            "        return",
            *reads,
            "    i = next_chunk(data)",
            f"    while i < a[{CHUNKS}]:",
            f"        {kernel_name}({call}, i)",
            "        i = next_chunk(data)",
        ])

    def driver(self, kernel):
        """``njit`` function(data: voidptr) running `kernel(*arguments, i)` (a numba function) on every chunk i
        it takes from the counter of the packed array at `data`; call it from a ``cfunc`` (a trampoline)."""
        scope = {"__name__": __name__, "carray": numba.carray, "int64_slots": int64_slots, "next_chunk": next_chunk,
                 "kernel": kernel, **{f"address_as_{k}": v for k, v in ADDRESS_AS.items()}}
        exec(compile(self.source(), f"<driver of {self.name}>", "exec"), scope)  # noqa: S102 - our own source
        return numba.njit(nogil=True)(scope[f"drive_{self.name}"])


_CALL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def trampoline(signature: KernelSignature):
    """Decorator: the ``cfunc(void(voidptr))`` of a function that calls ``signature.driver(...)``, compiled or
    loaded from numba's disk cache. A cached one compiled for another layout (numba sees edits of the
    decorated function's file only, not of this one) is dropped from the cache and compiled again: it is run
    once on an empty packed array (no chunks), and must accept its header."""
    def wrap(py):
        try:
            cache = FunctionCache(py)
        except RuntimeError:  # no source file to cache by (a function typed in a REPL): compiled each time
            return _checked(numba.cfunc(_TRAMPOLINE)(py), py, signature)
        compiled = numba.cfunc(_TRAMPOLINE, cache=True)(py)
        if _refuses(compiled, signature):
            cache.flush()
            compiled = numba.cfunc(_TRAMPOLINE, cache=True)(py)
        return _checked(compiled, py, signature)
    return wrap


def _checked(compiled, py, signature: KernelSignature):
    if _refuses(compiled, signature):
        raise RuntimeError(f"{py.__name__}: expected a function that runs the driver of {signature.name}")
    return compiled


def _refuses(compiled, signature: KernelSignature) -> bool:
    empty = np.zeros(signature.slots, dtype=np.int64)  # no chunks; every array at address 0 with size 0
    empty[SLOTS], empty[FINGERPRINT] = signature.slots, signature.fingerprint
    _CALL(compiled.address)(empty.ctypes.data)
    return bool(empty[STATUS])


@intrinsic
def next_chunk(typingctx, data):
    """Atomically take the next chunk index from a packed argument array (its ``COUNTER`` slot), as int64."""
    sig = types.int64(types.voidptr)

    def codegen(context, builder, signature, args):
        slots = builder.bitcast(args[0], ir.IntType(64).as_pointer())
        ptr = builder.gep(slots, [ir.Constant(ir.IntType(32), COUNTER)])
        return builder.atomic_rmw("add", ptr, ir.Constant(ir.IntType(64), 1), "monotonic")
    return sig, codegen


@intrinsic
def int64_slots(typingctx, data):
    """The packed argument array (a voidptr) as an int64 pointer, for ``numba.carray``."""
    sig = types.CPointer(types.int64)(types.voidptr)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(sig.return_type))
    return sig, codegen


def _address_as(dtype):
    @intrinsic
    def cast(typingctx, addr):
        sig = types.CPointer(dtype)(types.int64)

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], context.get_value_type(sig.return_type))
        return sig, codegen
    return cast


#: an array's address (an int64 slot) as a typed pointer, for ``numba.carray``, by dtype name
ADDRESS_AS = {name: _address_as(t) for name, t in _DTYPES.items()}
