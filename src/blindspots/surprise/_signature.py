"""One declared signature per compiled kernel, from which both sides of its packed int64 argument array are made.

A kernel run on torch's OpenMP threads (``_omp.run``) is a numba ``cfunc(void(voidptr))``: its arguments
travel as one int64 array. ``KernelSignature`` names the arguments in order, each an ``Array`` (dtype and
dimension names) or a ``Scalar`` (int64 or bool), and computes every slot offset once. From it come:

- ``pack(**arrays)`` (Python): checks every argument (given exactly once; dtype, ndim, C-contiguity, and
  that a dimension named twice has one size) and writes the array;
- ``driver(kernel)`` (numba): a generated ``njit`` function that checks the header, reads each argument at
  the offsets computed here, and calls ``kernel(*arguments, i)`` for every chunk i it takes from the counter.
  ``print(signature.source(kernel))`` shows the generated code.

Layout of a packed array: the header (``COUNTER``, ``CHUNKS``, ``SLOTS``, ``FINGERPRINT``, ``STATUS``),
then per argument in order: an array's address and its shape (1 + ndim slots), or a scalar (1 slot).

Why the header carries the slot count and a fingerprint: numba's disk cache of a trampoline is keyed by its
own source file only, so an edit here would leave cached trampolines reading an older layout. The driver
compares both with the values it was compiled with and, on a mismatch, writes ``STATUS`` and runs nothing
(``check_status`` then raises) instead of reading memory at stale offsets.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

#: Header slots of a packed array: the atomic chunk counter, the number of chunks, the array's slot count,
#: the layout's fingerprint, and the status a driver writes on a layout mismatch (0: none).
COUNTER, CHUNKS, SLOTS, FINGERPRINT, STATUS = range(5)
HEADER = 5

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
        if not self.dims.split():
            raise ValueError(f"dims: expected at least one dimension name, got {self.dims!r}")

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
            self.offsets[arg] = slot
            slot += spec.slots
        self.slots = slot
        self.fingerprint = zlib.crc32(repr((name, chunks, tuple(self.arguments.items()))).encode(), _SELF)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        return f"KernelSignature({self.name!r}, chunks={self.chunks!r}, {args}; {self.slots} slots)"

    # ---- Python side ----
    def pack(self, **given: np.ndarray | int | bool) -> np.ndarray:
        """int64 [slots] argument array of `given` (every declared argument, by name, exactly once). Arrays
        must stay alive, unmoved, until the kernel has run. ValueError naming the argument on a mismatch."""
        missing = [k for k in self.arguments if k not in given]
        extra = [k for k in given if k not in self.arguments]
        if missing or extra:
            raise ValueError(f"{self.name}: expected arguments {list(self.arguments)}, got missing {missing}, "
                             f"unexpected {extra}")
        out = np.zeros(self.slots, dtype=np.int64)
        out[CHUNKS], out[SLOTS], out[FINGERPRINT] = 0, self.slots, self.fingerprint
        sizes: dict[str, tuple[int, str]] = {}  # dimension name -> (size, the argument that set it)
        for arg, spec in self.arguments.items():
            value, o = given[arg], self.offsets[arg]
            if isinstance(spec, Scalar):
                out[o] = self._scalar(arg, spec, value)
                continue
            self._check_array(arg, spec, value, sizes)
            out[o] = value.ctypes.data
            out[o + 1:o + 1 + value.ndim] = value.shape
        out[CHUNKS] = sizes[self.chunks][0]
        return out

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
        scope = {"__name__": __name__, "carray": numba.carray, "int64_slots": int64_slots, "next_chunk": next_chunk, "kernel": kernel,
                 **{f"address_as_{k}": v for k, v in ADDRESS_AS.items()}}
        exec(compile(self.source(), f"<driver of {self.name}>", "exec"), scope)  # noqa: S102 - our own source
        return numba.njit(nogil=True)(scope[f"drive_{self.name}"])


def check_status(args: np.ndarray, kernel: str) -> None:
    """RuntimeError when a driver refused packed `args` (``STATUS`` set: laid out for another signature)."""
    if args[STATUS] != 0:
        raise RuntimeError(f"{kernel}: the compiled kernel expects another argument layout than the one packed "
                           f"({args[SLOTS]} slots, fingerprint {args[FINGERPRINT]}): it was packed for another "
                           "kernel, or numba's disk cache of blindspots/surprise/_fused_kernels.py is older than "
                           "_signature.py (remove its *.nbi / *.nbc files from __pycache__)")


@intrinsic
def next_chunk(typingctx, data):
    """Atomically take the next chunk index from a packed argument array (its ``COUNTER`` slot), as int64."""
    sig = types.int64(types.voidptr)

    def codegen(context, builder, signature, args):
        ptr = builder.gep(builder.bitcast(args[0], ir.IntType(64).as_pointer()), [ir.Constant(ir.IntType(32),
                                                                                               COUNTER)])
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
