"""The report's surprise page (`blindspots report <surprise analyze --out>`)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from blindspots.report.pages.surprise import write_surprise_report


def test_figure9_table_shows_every_group_at_a_few_savings(tmp_path):
    """The whole figure9.csv (21 savings a group) was cut after 60 rows: a fourth group never showed."""
    root = tmp_path / "sa"
    root.mkdir()
    pd.DataFrame({"group": ["road", "car", "sky", "person"], "n_images": 5, "rho_MDSA": -0.5,
                  "p_MDSA": 0.1}).to_csv(root / "table3.csv", index=False)
    savings = np.round(np.arange(21) * 0.05, 2)
    curves = pd.concat([pd.DataFrame({"saving": savings, "n_skipped": np.arange(21), "iou_inacc": 0.1 * g,
                                      "group": name}) for g, name in enumerate(["road", "car", "sky", "person"])])
    curves.to_csv(root / "figure9.csv", index=False)
    text = (write_surprise_report(root, tmp_path / "rep")).read_text()
    table = text[text.index("Figure 9: label-saving"):text.index("Surprise heatmaps")]
    assert table.count("<tr>") - 1 == 4 * 5  # header + 5 savings per group
    assert ">person<" in table and "more rows not shown" not in table
    assert ">0.25<" in table and ">0.05<" not in table
