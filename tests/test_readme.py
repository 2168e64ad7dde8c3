"""The README's Python quick start runs as written, with its two model files replaced by torch modules
(`module:factory?weights=...` specs) and its photos by a few generated images."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from core_walk import MODEL_SRC  # the core walk's small torch segmenter

ROOT = Path(__file__).resolve().parents[1]


def _python_quick_start() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"## Quick start: Python\n+```python\n(.*?)```", text, re.S)
    assert m, "README.md: expected a '## Quick start: Python' section with a python code block"
    return m.group(1)


def test_python_quick_start_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = _python_quick_start()
    assert len(code.strip().splitlines()) <= 12, "the quick start is meant to stay about ten lines"
    (tmp_path / "readme_models.py").write_text(MODEL_SRC)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    import readme_models

    for seed, name in ((0, "a.pt"), (1, "b.pt")):
        torch.manual_seed(seed)
        torch.save(readme_models.build(3).state_dict(), tmp_path / name)
    (tmp_path / "photos").mkdir()
    rng = np.random.default_rng(0)
    for i in range(8):
        Image.fromarray(rng.integers(0, 256, (40 + 8 * (i % 2), 48, 3), dtype=np.uint8)).save(
            tmp_path / "photos" / f"p{i}.png")
    for spec, ours in (("model.onnx?pad=32", "readme_models:build?weights=a.pt"),
                       ("other_model.pt", "readme_models:build?weights=b.pt")):
        assert f'"{spec}"' in code, f"README.md: expected the model spec {spec!r} in the Python quick start"
        code = code.replace(f'"{spec}"', f'"{ours}"')
    exec(compile(code, "README.md (Python quick start)", "exec"), {})
    out = capsys.readouterr().out
    assert "rank" in out and "reason" in out and (tmp_path / "scan" / "scan.json").is_file()


def test_readme_links_and_picture_exist() -> None:
    text = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", text)
    local = [t.split("#")[0] for t in targets if not re.match(r"^[a-z]+://", t) and not t.startswith("#")]
    assert "docs/img/mad_gallery.png" in local and "docs/glossary.md" in local
    missing = [t for t in local if t and not (ROOT / t).exists()]
    assert missing == [], f"README.md links to files that do not exist: {missing}"
