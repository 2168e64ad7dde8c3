"""Library messages do not tell a notebook user to run shell commands: no runtime string outside `cli/` names a
`blindspots <command>` (docstrings may). A message says what is missing in neutral terms, names the Python call
where one exists (and may name the command by itself, as "the `round` command"), or carries a
`blindspots.loop.NextAction`, which the command line phrases as a command and a notebook as a call.

The files that keep such strings are listed in ALLOWED with the reason; an entry that no longer holds one fails
the test too, so the list only shrinks."""
from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "blindspots"

#: file (relative to src/blindspots) -> why its runtime strings may name `blindspots <command>`
ALLOWED: dict[str, str] = {
    "loop/next_action.py": "the phrasebook: each next action as its command (and, beside it, its Python call)",
    "report/pages/engine_sections.py": "an HTML report page: the command that writes a missing part, as text for its reader",
    "report/pages/surprise.py": "an HTML report page: the command that writes the heatmaps, as text for its reader",
    "report/pages/defuse.py": "an HTML report page: the commands that write missing parts, as text for its reader",
}


def _commands() -> list[str]:
    """The command line's top-level command names (from the Typer app, so a new command is covered)."""
    import typer.main

    from blindspots.cli import app

    return sorted(typer.main.get_command(app).commands, key=len, reverse=True)  # type: ignore[attr-defined]


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, kinds) and n.body
            and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


def command_strings(root: Path, commands: list[str]) -> dict[str, list[tuple[int, str]]]:
    """{file: [(line, string)]} of the string constants (f-string parts too, not docstrings) of the .py files
    under `root` outside cli/ that name `blindspots <command>`."""
    pattern = re.compile(r"\bblindspots (?:%s)(?![-\w])" % "|".join(map(re.escape, commands)))
    found: dict[str, list[tuple[int, str]]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith("cli/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                    and pattern.search(node.value)):
                found.setdefault(rel, []).append((node.lineno, node.value[:100]))
    return found


def test_no_library_string_names_a_shell_command() -> None:
    found = command_strings(SRC, _commands())
    new = {f: hits for f, hits in found.items() if f not in ALLOWED}
    assert not new, ("strings outside cli/ tell the reader to run a `blindspots` command: say what is needed, name "
                     f"the Python call, or return a NextAction: {new}")
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED lists files that no longer name a command (remove them): {stale}"


def test_command_strings_finds_commands_not_docstrings_nor_words(tmp_path: Path) -> None:
    (tmp_path / "cli").mkdir()
    (tmp_path / "cli" / "x.py").write_text('MSG = "run `blindspots round P`"\n')
    (tmp_path / "a.py").write_text('"""Run `blindspots round P`."""\n'
                                   'def f(p):\n    """`blindspots status P` says why."""\n'
                                   '    raise ValueError(f"no scan of {p}; run `blindspots round {p}` first")\n'
                                   'WORDS = "a blindspots store, the blindspots pool, blindspots rounds"\n'
                                   'OTHER = "blindspots label-issues --out"\n'
                                   'BACKEND = "blindspots labelstudio-backend"\n')
    found = command_strings(tmp_path, ["round", "status", "label-issues", "labelstudio"])
    assert {f: sorted(hits) for f, hits in found.items()} == \
        {"a.py": [(4, "; run `blindspots round "), (6, "blindspots label-issues --out")]}
