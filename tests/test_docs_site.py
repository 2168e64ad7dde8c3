"""The documentation site (mkdocs.yml over docs/) builds with strict checks: no broken link or anchor between
pages, no missing page, every API reference entry found."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"{module} is not installed (pip install -e '.[docs]')")
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stderr[-6000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "glossary" / "index.html").is_file()
    assert "scan_pool" in (tmp_path / "site" / "reference" / "index.html").read_text()
