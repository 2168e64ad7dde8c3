"""The core install's walk, run as a script in its own process: scan a folder of photos with two torch models
(`module:factory?weights=...` specs) and mine it with MAD, through the command line, then check that a model kind
of an extra reports the extra by name. Prints one JSON line of what it saw.

    python tests/core_walk.py WORKDIR [--block-extras]

--block-extras: refuse to import every package an extra provides (blindspots.extras.EXTRA_OF, and the web
stack's starlette), so that a full environment behaves as a core-only install would. tests/test_install.py runs
it both ways: in the test environment with --block-extras, and in a fresh virtualenv holding the core only.
"""
from __future__ import annotations

import importlib.abc
import json
import os
import sys
from pathlib import Path

MODEL_SRC = '''
import torch
from torch import nn


def build(c: int = 3) -> nn.Module:
    """A small fully convolutional segmenter: uint8 images become logits [N, c, H, W]."""
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, int(c), 3, padding=1))
'''


class BlockExtras(importlib.abc.MetaPathFinder):
    """Refuses the extras' packages as an environment without them would (ModuleNotFoundError)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname.split(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname.split(".")[0])
        return None


def main(work: Path, block: bool) -> dict:
    from blindspots.extras import EXTRA_OF

    if block:
        sys.meta_path.insert(0, BlockExtras(set(EXTRA_OF) | {"starlette"}))
    import numpy as np
    import torch
    import typer
    from PIL import Image

    from blindspots.cli import app

    work.mkdir(parents=True, exist_ok=True)
    (work / "core_walk_models.py").write_text(MODEL_SRC)
    sys.path.insert(0, str(work))
    os.chdir(work)  # module:factory specs import from the current folder
    import core_walk_models

    for seed, name in ((0, "target.pt"), (1, "rival.pt")):
        torch.manual_seed(seed)
        torch.save(core_walk_models.build(3).state_dict(), work / name)
    rng = np.random.default_rng(0)
    pool = work / "pool"
    pool.mkdir(exist_ok=True)
    for i in range(12):  # photos of three sizes: batches of one size, each image's maps at its own size
        h, w = (40, 56) if i % 3 == 0 else (48, 48) if i % 3 == 1 else (33, 65)
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(pool / f"img_{i:02d}.png")

    cli = typer.main.get_command(app)

    def run(*args: str) -> None:
        cli.main(list(args), prog_name="blindspots", standalone_mode=False)

    run("scan", str(pool), "-t", "tgt=core_walk_models:build?weights=target.pt",
        "-c", "rival=core_walk_models:build?weights=rival.pt", "--out", "scan", "--no-progress")
    run("mine", "scan", "--strategy", "mad", "-n", "4", "--out", "picks")
    picks = sorted(p.name for p in (work / "picks").iterdir())
    from blindspots.models import load_model

    (work / "m.onnx").write_bytes(b"not a model")
    try:
        load_model(str(work / "m.onnx"))
        onnx_error = ""
    except ValueError as e:
        onnx_error = str(e)
    loaded_extras = sorted(n for n in EXTRA_OF if n in sys.modules)
    return {"torch": torch.__version__, "picks": picks, "onnx_error": onnx_error, "loaded_extras": loaded_extras}


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--block-extras"):
        sys.exit("usage: python tests/core_walk.py WORKDIR [--block-extras]")
    print(json.dumps(main(Path(sys.argv[1]).resolve(), len(sys.argv) == 3)))
