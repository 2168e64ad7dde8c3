"""The engines' sections of the round page: label issues, surprise and Defuse, when they ran for the
project.

An engine "ran for the project" when its output folder lies in the project folder: a direct
subfolder of PROJECT or of PROJECT/engines/ (e.g. `blindspots label-issues ... --out
PROJECT/label-issues`, `blindspots surprise analyze ... --out PROJECT/surprise`, the `--out` folders
of `blindspots defuse ...` under PROJECT/defuse/). Each folder found is recognised by the same tests
as `blindspots report FOLDER` and drawn with the section builders of its standalone page, one heading
level down; its figures are copied under OUT/figures/<engine>-<k>/ so the round folder stays
self-contained.
"""
from __future__ import annotations

from pathlib import Path

from blindspots.report.pages.defuse import (defuse_scenario_section, figure_block, find_defuse_parts, honest_section,
                                          is_defuse_dir, other_figures, sweep_blocks)
from blindspots.report.pages.label_issues import is_label_issues_dir, label_issues_sections
from blindspots.report.pages.surprise import is_surprise_dir, surprise_sections
from blindspots.report.viewmodels.blocks import Block, Figures, Group, Heading, Text, code

ENGINE_TITLES = {"labels": "Label issues", "surprise": "Surprise adequacy", "defuse": "Defuse failure scenarios"}
SKIP = {"scans", "checkpoints", "reports", "masks", "cache"}  # the project's own folders, never engine outputs


def find_engine_runs(project_dir: str | Path) -> list[tuple[str, Path]]:
    """(engine, folder) of each engine output in the project: direct subfolders of project_dir and of
    project_dir/engines, in name order; engine is "labels", "surprise" or "defuse"."""
    root = Path(project_dir)
    places = [root] + ([root / "engines"] if (root / "engines").is_dir() else [])
    found: list[tuple[str, Path]] = []
    for place in places:
        for d in sorted(x for x in place.iterdir() if x.is_dir() and x.name not in SKIP | {"engines"}):
            if is_label_issues_dir(d):
                found.append(("labels", d))
            elif is_surprise_dir(d):
                found.append(("surprise", d))
            elif is_defuse_dir(d):
                found.append(("defuse", d))
    return found


def defuse_sections(root: Path, out: Path, *, n_per: int = 10, anchor: str = "defuse-",
                    fig_dir: str = "defuse/") -> list[Block]:
    """A Defuse run folder as subsections (h3): the Figure 4 table and the review images of each
    failure scenario, Figure 3 (scenario grids), the λ sweep with Figure 5, the other figures, and
    the honest table (with per-scenario judge agreement) when the run wrote one."""
    found = find_defuse_parts(root)
    figs_dir = found.get("figures")
    parts: list[Block] = [Heading("Failure scenarios (Figure 4 table)", anchor + "scenarios", 3)]
    if "review" in found:
        parts += defuse_scenario_section(found["review"], out, n_per)[0][1:]  # [0] is the standalone page's h2
    else:
        parts.append(Text.of("No review folder (items.csv): run ", code("blindspots defuse export-review"), "."))
    if figs_dir is not None and (figs_dir / "fig3_scenarios.png").is_file():
        parts.append(figure_block(figs_dir, "fig3_scenarios.png", out, fig_dir))
    parts.append(Heading("Correction (λ sweep, Figure 5)", anchor + "correction", 3))
    if "correct" in found:
        parts += sweep_blocks(found["correct"], with_path=False)[0]
        if figs_dir is not None and (figs_dir / "fig5_tradeoff.png").is_file():
            parts.append(figure_block(figs_dir, "fig5_tradeoff.png", out, fig_dir))
    else:
        parts.append(Text.of("No correction folder (sweep.csv): run ", code("blindspots defuse correct"), "."))
    other = other_figures(found, out, fig_dir)
    if other:
        parts += [Heading("Other Defuse figures", anchor + "figures", 3), Figures(other)]
    if "honest" in found:  # before / λ = 0 control / identified examples / Defuse, judged independently
        parts += [Heading("Measured honestly", anchor + "honest", 3)] + honest_section(found["honest"])[1:]
    return parts


def engine_sections(project_dir: str | Path, out: Path, *, n: int = 12) -> tuple[list[Block], list[dict]]:
    """View-model blocks for every engine output of the project, and one row each (engine, folder, anchor:
    the id of its heading, title). Both empty when no engine ran for the project."""
    runs = find_engine_runs(project_dir)
    if not runs:
        return [], []
    parts: list[Block] = []
    rows = []
    seen_defuse = False
    for k, (engine, folder) in enumerate(runs):
        anchor, fig_dir = f"{engine}-{k}-", f"{engine}-{k}/"
        parts.append(Heading(f"{ENGINE_TITLES[engine]}: {folder.name}", f"{engine}-{k}"))
        parts.append(Text.of(f"Read from {folder}; its standalone page: ", code(f"blindspots report {folder}"), ".",
                             style="meta"))
        if engine == "labels":
            parts += label_issues_sections(folder, out, n=2 * n, level=3, anchor=anchor, fig_dir=fig_dir)[0]
        elif engine == "surprise":
            parts += surprise_sections(folder, out, n=n, level=3, anchor=anchor, fig_dir=fig_dir)
        elif not seen_defuse:  # review images keep their item ids as file names: one Defuse run per page
            parts.append(Group("pixelated", defuse_sections(folder, out, anchor=anchor, fig_dir=fig_dir)))
            seen_defuse = True
        else:
            parts.append(Text.of("Another Defuse run is shown above; open this one's own page."))
        rows.append({"engine": engine, "folder": str(folder), "anchor": f"{engine}-{k}",
                     "title": ENGINE_TITLES[engine]})
    return parts, rows
