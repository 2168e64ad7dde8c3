"""Helpers for pages that show what another command already wrote: copy its PNG figures beside the
page (so the report folder is self-contained) and show its CSV tables."""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from blindspots.report.html import rel_url
from blindspots.report.viewmodels.blocks import Image, Table


def copy_figure(src: Path, out: Path, name: str, caption: str) -> Image:
    """Copy the image `src` to out/figures/<name>; the captioned figure linking it relatively."""
    dst = out / "figures" / name
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)
    # Another command's figure (often many panels): shown at its own size, not squeezed to 600 px.
    return Image(rel_url(dst, out), caption, caption=caption, cls="natural")


def frame_table(df: pd.DataFrame, max_rows: int = 50, digits: int = 4) -> Table:
    """A DataFrame as a table (floats rounded to `digits`; at most `max_rows` rows, the rest counted)."""
    shown = df.head(max_rows)
    numeric = {j for j, c in enumerate(shown.columns) if pd.api.types.is_numeric_dtype(shown[c])}
    rows = [[f"{v:.{digits}g}" if isinstance(v, float) else v for v in r] for r in shown.itertuples(index=False)]
    return Table([str(c) for c in shown.columns], rows, numeric, more=len(df) - len(shown))


def read_table(stem: Path) -> pd.DataFrame | None:
    """stem.csv or stem.parquet (the first found) as a DataFrame, else None."""
    for ext, reader in ((".csv", pd.read_csv), (".parquet", pd.read_parquet)):
        if stem.with_suffix(ext).is_file():
            return reader(stem.with_suffix(ext))
    return None
