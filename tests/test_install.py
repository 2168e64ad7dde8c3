"""How blindspots installs: version ranges (no exact pins) in its metadata, a lean core, extras reported by name,
the exact versions in constraints.txt, and a core-only install that scans and mines with a torch model, also
beside an older torch that it must keep (slow: a fresh virtualenv)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from blindspots.extras import EXTRA_OF, MissingExtraError, install_hint, require

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
WALK = ROOT / "tests" / "core_walk.py"
#: the oldest torch the core is tested with (the lower bound in pyproject.toml)
OLDEST_TORCH = "2.13.0"


def _requirements() -> dict[str, list[Requirement]]:
    groups = {"core": [Requirement(r) for r in PYPROJECT["dependencies"]]}
    groups.update({k: [Requirement(r) for r in v] for k, v in PYPROJECT["optional-dependencies"].items()})
    return groups


def _constraints(file: str = "constraints.txt") -> dict[str, str]:
    pins = {}
    for line in (ROOT / file).read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"{file}: expected NAME==VERSION lines, got {line!r}"
            pins[canonicalize_name(name)] = version
    return pins


def test_minimum_constraints_are_the_core_lower_bounds() -> None:
    """constraints-min.txt pins every core dependency at the lower bound of its range, nothing else."""
    pins = _constraints("constraints-min.txt")
    lower = {}
    for r in _requirements()["core"]:
        bounds = [s.version for s in r.specifier if s.operator == ">="]
        assert len(bounds) == 1, f"pyproject.toml: expected one '>=' bound for {r.name}, got {r}"
        lower[canonicalize_name(r.name)] = bounds[0]
    assert {n: Version(v) for n, v in pins.items()} == {n: Version(v) for n, v in lower.items()}
    assert pins["torch"] == OLDEST_TORCH


def test_metadata_has_ranges_and_no_exact_pins() -> None:
    for group, reqs in _requirements().items():
        for r in reqs:
            ops = {s.operator for s in r.specifier}
            assert not ops & {"==", "==="}, f"[{group}] pins {r} exactly: exact versions belong in constraints.txt"
    torch = {r.name: r for r in _requirements()["core"]}["torch"]
    assert torch.specifier.contains(OLDEST_TORCH) and torch.specifier.contains("2.14.1")
    assert torch.specifier.contains("2.20.0"), "torch: a newer release than the tested ones must be allowed"


def test_core_holds_none_of_the_extras_packages() -> None:
    core = {canonicalize_name(r.name) for r in _requirements()["core"]}
    extra_only = {"torchvision", "fastapi", "uvicorn", "onnx", "onnxruntime", "onnxscript", "transformers", "imageio",
                  "imageio-ffmpeg", "nibabel", "scikit-image", "segmentation-models-pytorch", "label-studio-sdk",
                  "fiftyone", "ray", "s3fs", "python-multipart"}
    assert not core & extra_only, f"the core installs extras' packages: {sorted(core & extra_only)}"
    extras = set(PYPROJECT["optional-dependencies"])
    assert {"app", "onnx", "hf", "zoo", "video", "mri", "all", "dev", "docs"} <= extras
    assert set(EXTRA_OF.values()) <= extras, "blindspots.extras names an extra pyproject.toml does not define"
    everything = " ".join(PYPROJECT["optional-dependencies"]["all"])
    for extra in ("app", "onnx", "hf", "zoo", "video", "mri", "labelstudio"):
        assert extra in everything, f"[all] lacks [{extra}]"


def test_constraints_pin_every_core_package_and_the_tested_torch() -> None:
    pins = _constraints()
    assert pins["torch"].startswith("2.14.1") and pins["torchvision"].startswith("0.29.1")
    for r in _requirements()["core"] + _requirements()["app"] + _requirements()["docs"]:
        name = canonicalize_name(r.name)
        if r.marker is not None and not r.marker.evaluate():
            continue
        assert name in pins, f"constraints.txt: expected a pin for {name}"
        assert r.specifier.contains(pins[name], prereleases=True), f"constraints.txt: {name}=={pins[name]} outside {r}"
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "-c constraints.txt" in setup, "scripts/setup.sh must install with the constraints file"


def test_require_names_the_extra_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "nibabel", None)  # None in sys.modules: `import nibabel` raises ImportError
    with pytest.raises(MissingExtraError) as err:
        require("nibabel", "reading a NIfTI volume")
    msg = str(err.value)
    assert "\n" not in msg and install_hint("mri") in msg and "reading a NIfTI volume" in msg
    assert isinstance(err.value, ValueError) and isinstance(err.value, ImportError)
    with pytest.raises(ValueError, match=r"module: expected one of the optional packages .* got 'numpy'"):
        require("numpy", "anything")


def test_a_missing_extra_is_one_error_line_on_the_command_line(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['onnxruntime'] = None\n"
            "from blindspots.cli import app\n"
            f"app(['scan', {str(tmp_path)!r}, '-t', 't=' + {str(tmp_path / 'm.onnx')!r}, '--out', "
            f"{str(tmp_path / 'scan')!r}])\n")
    (tmp_path / "m.onnx").write_bytes(b"x")
    (tmp_path / "a.png").write_bytes(b"x")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "blindspots[onnx]" in lines[0], r.stderr


def _walk(python: str, work: Path, *extra: str, env: dict | None = None) -> dict:
    r = subprocess.run([python, str(WALK), str(work), *extra], capture_output=True, text=True, timeout=900,
                       env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _check_walk(seen: dict) -> None:
    assert {"index.html", "picks.csv", "picks.parquet"} <= set(seen["picks"]), seen
    assert "blindspots[onnx]" in seen["onnx_error"], seen
    assert seen["loaded_extras"] == [], f"the core walk imported extras' packages: {seen['loaded_extras']}"


def test_core_only_import_path_scans_and_mines_with_a_torch_model(tmp_path: Path) -> None:
    """The extras' packages refused at import: the scan, MAD mining and the gallery still run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    _check_walk(_walk(sys.executable, tmp_path / "walk", "--block-extras", env=env))


@pytest.mark.slow
def test_fresh_venv_core_install_keeps_an_older_torch(tmp_path: Path) -> None:
    """`pip install blindspots` into an environment that already has the oldest supported torch keeps it,
    installs no extra's package, and the core scans and mines, with every core dependency at the oldest
    version it supports (constraints-min.txt)."""
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed copy, not the sources
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    py = str(venv / "bin" / "python")
    pip = [py, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    torch_pins = [f"torch=={OLDEST_TORCH}"]
    r = subprocess.run(pip + torch_pins, capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0:
        pytest.skip(f"could not install {torch_pins} from this machine's package index: {r.stderr[-300:]}")
    pkg = tmp_path / "pkg"  # a copy: pip builds in the source tree and would leave build/ in the repository
    shutil.copytree(ROOT / "src", pkg / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, pkg / name)
    r = subprocess.run(pip + ["-c", str(ROOT / "constraints-min.txt"), str(pkg)], capture_output=True, text=True,
                       timeout=1800, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    listed = json.loads(subprocess.run([py, "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                                       check=True, timeout=300, env=env).stdout)
    have = {canonicalize_name(p["name"]): p["version"].split("+")[0] for p in listed}
    oldest = _constraints("constraints-min.txt")
    assert {n: have.get(n) for n in oldest} == oldest, "the core was not installed at its oldest versions"
    code = ("import importlib.util, json, torch; from blindspots.extras import EXTRA_OF; "
            "print(json.dumps([torch.__version__, sorted(m for m in EXTRA_OF if importlib.util.find_spec(m))]))")
    torch_v, present = json.loads(subprocess.run([py, "-c", code], capture_output=True, text=True,
                                                           check=True, timeout=300, env=env).stdout)
    assert torch_v.split("+")[0] == OLDEST_TORCH, f"the install replaced torch {OLDEST_TORCH} by {torch_v}"
    assert present == [], f"the core install brought extras' packages: {present}"
    seen = _walk(py, tmp_path / "walk", env=env)
    _check_walk(seen)
    assert seen["torch"].split("+")[0] == OLDEST_TORCH


@pytest.mark.slow
def test_fiftyone_extra_resolves_to_the_current_fiftyone(tmp_path: Path) -> None:
    """`pip install 'blindspots[fiftyone]'` beside torch resolves to the FiftyOne the tests use (its web stack
    is FiftyOne's own: the core pins nothing of it), not to an old release."""
    setup = (ROOT / "scripts" / "test.sh").read_text()
    tested = next(w.split("==")[1] for w in setup.split() if w.startswith("fiftyone=="))
    venv = tmp_path / "venv"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pkg = tmp_path / "pkg"
    shutil.copytree(ROOT / "src", pkg / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, pkg / name)
    report = tmp_path / "report.json"
    r = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed",
                        "--report", str(report), f"{pkg}[fiftyone]", f"torch=={OLDEST_TORCH}"],
                       capture_output=True, text=True, timeout=1800, env=env)
    if r.returncode != 0 and ("connection" in r.stderr.lower() or "No matching distribution" in r.stderr):
        pytest.skip(f"the package index cannot resolve here: {r.stderr[-300:]}")
    assert r.returncode == 0, r.stderr[-3000:]
    got = {i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]}
    from packaging.version import Version

    assert Version(got["fiftyone"]) >= Version(tested), f"[fiftyone] resolved to FiftyOne {got['fiftyone']}"
    assert "fastapi" not in got and "uvicorn" not in got, "the core brought a web stack that FiftyOne would fight"
