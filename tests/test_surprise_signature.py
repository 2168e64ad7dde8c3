"""Kernel signatures (surprise._signature): pack checks every argument, the generated driver reads them back."""
from __future__ import annotations

import numba
import numpy as np
import pytest

from blindspots.surprise import _fused_kernels as k
from blindspots.surprise._omp import run
from blindspots.surprise._omp import CHUNKS, FINGERPRINT, HEADER, SLOTS
from blindspots.surprise._signature import BOOL, INT64, Array, KernelSignature


@numba.njit(nogil=True)
def _scale_rows(x, by, shift, negate, out, i):
    """out[i] = (x[i] * by[i] + shift) * (-1 if negate else 1)."""
    sign = -1.0 if negate else 1.0
    for j in range(x.shape[1]):
        out[i, j] = np.float32((x[i, j] * by[i] + shift) * sign)


SCALE = KernelSignature("scale_rows", "n", x=Array("float32", "n d"), by=Array("float32", "n"), shift=INT64,
                        negate=BOOL, out=Array("float32", "n d"))
_drive = SCALE.driver(_scale_rows)


@numba.cfunc(numba.types.void(numba.types.voidptr))
def _scale_chunks(data):
    _drive(data)


def arrays(n=7, d=5):
    rng = np.random.default_rng(0)
    return {"x": rng.normal(size=(n, d)).astype(np.float32), "by": rng.normal(size=n).astype(np.float32),
            "shift": 3, "negate": True, "out": np.zeros((n, d), np.float32)}


def test_layout_from_the_signature():
    packed = SCALE.pack(**arrays())
    assert SCALE.slots == HEADER + (1 + 2) + (1 + 1) + 1 + 1 + (1 + 2) == packed.size
    assert packed[SLOTS] == SCALE.slots and packed[CHUNKS] == 7 and packed[FINGERPRINT] == SCALE.fingerprint
    assert SCALE.offsets == {"x": 5, "by": 8, "shift": 10, "negate": 11, "out": 12}
    assert list(packed[[9, 10, 11, 13, 14]]) == [7, 3, 1, 7, 5]  # by's length, shift, negate, out's shape
    src = SCALE.source()
    assert "out = carray(address_as_float32(a[12]), (a[13], a[14]))" in src and "negate = a[11] != 0" in src


@pytest.mark.parametrize("threads", [1, 2])
def test_generated_driver_runs_every_chunk(threads):
    a = arrays()
    run(_scale_chunks, SCALE.pack(**a), threads=threads)
    np.testing.assert_array_equal(a["out"], -(a["x"] * a["by"][:, None] + 3))


@pytest.mark.parametrize("arg,value,match", [
    ("x", np.zeros((7, 5), np.float64), r"x: expected a C-contiguous float32 array \[n, d\], got float64"),
    ("x", np.zeros(35, np.float32), r"x: expected .* \[n, d\], got float32 of shape \(35,\)"),
    ("x", np.zeros((5, 7), np.float32).T, r"x: expected a C-contiguous .* got strides"),
    ("x", [[0.0] * 5] * 7, r"x: expected .* got list"),
    ("by", np.zeros(6, np.float32), r"by: expected dimension 0 \(n\) of size 7 as in x, got shape \(6,\)"),
    ("shift", 1.5, r"shift: expected an int64 integer, got float"),
    ("shift", True, r"shift: expected an int64 integer, got bool"),
    ("shift", 2**63, r"shift: expected an int64 integer, got 9223372036854775808 \(out of range\)"),
    ("negate", 1, r"negate: expected a bool, got int"),
])
def test_pack_names_the_bad_argument(arg, value, match):
    a = arrays()
    a[arg] = value
    with pytest.raises(ValueError, match=f"scale_rows: {match}"):
        SCALE.pack(**a)


def test_numpy_scalars_accepted():
    a = arrays()
    packed = SCALE.pack(**{**a, "shift": np.int32(-4), "negate": np.bool_(False)})
    assert packed[10] == -4 and packed[11] == 0


def test_pack_wants_every_argument_once():
    a = arrays()
    del a["by"]
    with pytest.raises(ValueError, match=r"missing \['by'\], unexpected \[\]"):
        SCALE.pack(**a)
    with pytest.raises(ValueError, match=r"missing \[\], unexpected \['scale'\]"):
        SCALE.pack(**arrays(), scale=2)


def test_fixed_size_dimension_checked():
    sig = KernelSignature("pairs", "n", p=Array("int64", "n 2"))
    sig.pack(p=np.zeros((3, 2), np.int64))
    with pytest.raises(ValueError, match=r"pairs: p: expected a C-contiguous int64 array \[n, 2\], got shape"):
        sig.pack(p=np.zeros((3, 3), np.int64))


def test_bad_declarations():
    with pytest.raises(ValueError, match="chunks: expected a dimension name"):
        KernelSignature("k", "m", x=Array("float32", "n"))
    with pytest.raises(ValueError, match="dtype: expected one of"):
        Array("float16", "n")
    with pytest.raises(ValueError, match="i: expected an argument name other than the driver's own"):
        KernelSignature("k", "n", x=Array("float32", "n"), i=INT64)
    with pytest.raises(ValueError, match="dims: expected dimension names or sizes"):
        Array("float32", "n, d")
    with pytest.raises(ValueError, match="kind: expected 'int64' or 'bool'"):
        from blindspots.surprise._signature import Scalar
        Scalar("float32")


def test_driver_refuses_another_layout_and_runs_nothing():
    """The slot count and fingerprint are checked by the compiled driver: arguments packed for another
    kernel (or for an older layout) raise instead of being read at the wrong offsets."""
    a = arrays()
    packed = SCALE.pack(**a)
    with pytest.raises(RuntimeError, match="argmax_chunks: the compiled kernel expects another argument layout"):
        run(k.argmax_chunks, packed, threads=1)
    packed = SCALE.pack(**a)
    packed[FINGERPRINT] += 1
    with pytest.raises(RuntimeError, match="another argument layout"):
        run(_scale_chunks, packed, threads=1)
    assert not a["out"].any()  # nothing was written


def test_run_checks_the_slot_count():
    packed = SCALE.pack(**arrays())
    with pytest.raises(ValueError, match="args: expected a packed int64 argument array"):
        run(_scale_chunks, packed[:-1], threads=1)
    with pytest.raises(ValueError, match="args: expected a packed int64 argument array"):
        run(_scale_chunks, packed.astype(np.int32), threads=1)


def test_fused_kernel_pack_names_the_argument():
    """The fused passes check their arrays before any kernel runs (dtype, shared dimensions)."""
    n, h, w = 2, 6, 5
    good = dict(pred=np.zeros((n, h, w), np.int64), lut=np.zeros(3, np.int64), y0=np.zeros(h, np.int64),
                y1=np.zeros(h, np.int64), x0=np.zeros(w, np.int64), x1=np.zeros(w, np.int64),
                mark=np.zeros((3, n, 2, 2), np.uint8), counts=np.zeros((3, n), np.int64),
                span=np.zeros((n, 2), np.int64))
    assert k.MARK.pack(**good)[CHUNKS] == n
    with pytest.raises(ValueError, match=r"mark_image: y1: expected dimension 0 \(H\) of size 6 as in pred"):
        k.MARK.pack(**{**good, "y1": np.zeros(h + 1, np.int64)})
    with pytest.raises(ValueError, match=r"mark_image: mark: expected a C-contiguous uint8 array \[K, n, h0, w0\], "
                                         r"got int64"):
        k.MARK.pack(**{**good, "mark": np.zeros((3, n, 2, 2), np.int64)})


SIGNATURE_V1 = '''
from blindspots.surprise._signature import Array, KernelSignature
SIG = KernelSignature("double", "n", x=Array("float32", "n"), out=Array("float32", "n"))
'''
KERNEL = '''
import numba
from blindspots.surprise._signature import trampoline
from sig_module import SIG

@numba.njit
def double(x, out, i):
    out[i] = 2 * x[i]

_drive = SIG.driver(double)

@trampoline(SIG)
def double_chunks(data):
    _drive(data)
'''
RUN = '''
import numpy as np
from blindspots.surprise._omp import run
from kernel_module import SIG, double_chunks
x = np.arange(5, dtype=np.float32)
out = np.zeros(5, np.float32)
run(double_chunks, SIG.pack(x=x, out=out), threads=1)
assert (out == 2 * x).all(), out
print("ok")
'''


def test_trampoline_compiled_again_when_the_cached_one_has_another_layout(tmp_path):
    """numba's disk cache sees edits of the trampoline's file only: after an edit elsewhere that changes the
    layout (here the signature's module), the cached trampoline is refused at import and compiled again."""
    import os
    import subprocess
    import sys

    (tmp_path / "sig_module.py").write_text(SIGNATURE_V1)
    (tmp_path / "kernel_module.py").write_text(KERNEL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    for version in (1, 2):
        if version == 2:  # another dimension name: another fingerprint, the kernel's file unchanged
            (tmp_path / "sig_module.py").write_text(SIGNATURE_V1.replace('"n"', '"m"'))
        done = subprocess.run([sys.executable, "-c", RUN], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]
    assert list((tmp_path / "__pycache__").glob("kernel_module*.nbi"))  # it was cached


def test_docs_example_runs(tmp_path):
    """The example of docs/surprise.md, "Kernel signatures", runs as written, from a file (numba caches
    its trampoline beside it) and typed in (no file: compiled without the cache)."""
    import re
    import runpy
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "surprise.md").read_text(encoding="utf-8")
    block = [b for b in re.findall(r"```python\n(.*?)```", page, flags=re.S) if "KernelSignature" in b]
    assert len(block) == 1
    (tmp_path / "example.py").write_text(block[0])
    runpy.run_path(str(tmp_path / "example.py"))
    exec(compile(block[0], "<typed in>", "exec"), {})  # noqa: S102 - the page's own example
