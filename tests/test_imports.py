"""The package's import graph (ast, every import including those inside functions) has no cycles and no
upward imports across the layers of docs/architecture.md:

    cli, app  ->  loop, report  ->  engines  ->  foundations

Private names stay private: no module imports an underscore-prefixed name from another module, and a private
module (`labels/_internal/...`, `_validation.py`) is imported only from inside the package that holds it. Helpers a
package shares between its modules get plain names in that package's private module (as `labels/_internal/` does).

Known violations in files this change does not own are listed in KNOWN_* with the issue that removes them;
an entry that no longer occurs fails the test too, so the lists only shrink.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "blindspots"

#: layer of each top-level package / module (higher may import lower, never the reverse)
LAYERS: dict[str, int] = {
    **dict.fromkeys(["cli", "app", "__main__", "__init__"], 3),
    **dict.fromkeys(["loop", "report", "integrations"], 2),
    **dict.fromkeys(["scan", "mine", "surprise", "labels", "defuse", "scenarios", "human", "training"], 1),
    **dict.fromkeys(["models", "data", "metrics", "ids", "_validation", "config", "allocator", "atomic", "batches", "machine"], 0),
}

#: (importer module, imported module) cycles' edges still to be removed.
KNOWN_MODULE_CYCLE_EDGES: set[tuple[str, str]] = set()
#: (importer module, imported module) upward imports still to be removed
KNOWN_UPWARD: set[tuple[str, str]] = set()
#: (importer package, imported package) package cycles' edges still to be removed
KNOWN_PACKAGE_CYCLE_EDGES: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / ROOT).rglob("*.py"))}


def _resolve(importer: str, is_package: bool, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".") if is_package else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in the file, function bodies included)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.level, node.module)
                # `from pkg import sub` imports the module pkg.sub when there is one, else a name of pkg
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                while t and t not in mods:  # `import a.b.c` of a name inside a module: its module
                    t = t.rpartition(".")[0]
                if t.startswith(ROOT + ".") and t != name:
                    graph[name].add(t)
    return graph


def _top(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _cycle_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Edges that lie on a cycle: both ends in the same strongly connected component (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    comp: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    counter = [0]

    def visit(v: str) -> None:  # iterative would be longer; the graph is a few hundred modules deep at most
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on.discard(w)
                comp[w] = index[v]
                if w == v:
                    break

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return {(a, b) for a, bs in graph.items() for b in bs if comp[a] == comp[b]}


def _package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    pkgs: dict[str, set[str]] = {}
    for a, bs in graph.items():
        pkgs.setdefault(_top(a), set()).update(_top(b) for b in bs if _top(b) != _top(a))
    return pkgs


def private_imports(mods: dict[str, Path] | None = None) -> set[tuple[str, str]]:
    """(importer module, what it imports) for every import of a private name from outside where it is private:
    an underscore-prefixed name of another module, or a module below an underscore-prefixed package or module
    from outside the package that holds it (dunder names such as `__version__` are public).

    mods: module name -> file (default: every module of the package)."""
    mods = mods if mods is not None else _modules()
    found: set[tuple[str, str]] = set()
    for name, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, is_package, node.level, node.module)
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                if not t.startswith(ROOT + "."):
                    continue
                parts = t.split(".")
                module = next((".".join(parts[:k]) for k in range(len(parts), 0, -1) if ".".join(parts[:k]) in mods), "")
                for k, part in enumerate(parts[1:], start=1):
                    if not part.startswith("_") or part.startswith("__"):
                        continue
                    prefix = ".".join(parts[: k + 1])
                    if prefix in mods or any(m.startswith(prefix + ".") for m in mods):  # private module / package
                        owner = ".".join(parts[:k])  # private to the package above it
                        if not (name == owner or name.startswith(owner + ".")):
                            found.add((name, t))
                    elif module != name:  # a private name of another module
                        found.add((name, t))
                    break
    return found


GRAPH = import_graph()


def test_every_top_level_package_has_a_layer() -> None:
    assert {_top(m) for m in GRAPH} <= set(LAYERS)


def test_graph_sees_function_level_imports() -> None:
    assert "blindspots.models.load" in GRAPH["blindspots.cli.surprise"]


def test_no_module_cycles() -> None:
    found = _cycle_edges(GRAPH)
    assert found - KNOWN_MODULE_CYCLE_EDGES == set(), "import cycle (edges on it)"
    assert KNOWN_MODULE_CYCLE_EDGES - found == set(), "fixed: remove these from KNOWN_MODULE_CYCLE_EDGES"


def test_no_package_cycles() -> None:
    found = _cycle_edges(_package_graph(GRAPH))
    assert found - KNOWN_PACKAGE_CYCLE_EDGES == set(), "package import cycle (edges on it)"
    assert KNOWN_PACKAGE_CYCLE_EDGES - found == set(), "fixed: remove these from KNOWN_PACKAGE_CYCLE_EDGES"


def test_no_upward_imports() -> None:
    found = {(a, b) for a, bs in GRAPH.items() for b in bs if LAYERS[_top(b)] > LAYERS[_top(a)]}
    assert found - KNOWN_UPWARD == set(), "upward import (a lower layer imports a higher one)"
    assert KNOWN_UPWARD - found == set(), "fixed: remove these from KNOWN_UPWARD"


def test_no_private_names_cross_modules() -> None:
    assert sorted(private_imports()) == [], ("private name imported from another module (give a helper shared "
                                             "inside a package a plain name in that package's private module)")


def test_private_imports_finds_private_names_and_modules(tmp_path: Path) -> None:
    files = {
        "blindspots.p.a": "def _helper(): ...\nX = 1\n",
        "blindspots.p.b": "from blindspots.p.a import _helper, X\nfrom .a import _helper as h\n",
        "blindspots.p._internal.c": "def shared(): ...\n",
        "blindspots.p.d": "from blindspots.p._internal.c import shared\nfrom blindspots.p.a import __doc__\n",
        "blindspots.q.e": "from blindspots.p._internal.c import shared\nimport blindspots.p._internal.c\n",
        "blindspots._v": "def check(): ...\n",
        "blindspots.q.f": "from blindspots._v import check\nfrom blindspots import _v\n",
    }
    mods = {}
    for name, text in files.items():
        path = tmp_path / (name.replace(".", "_") + ".py")
        path.write_text(text)
        mods[name] = path
    assert private_imports(mods) == {("blindspots.p.b", "blindspots.p.a._helper"),
                                     ("blindspots.q.e", "blindspots.p._internal.c.shared"),
                                     ("blindspots.q.e", "blindspots.p._internal.c")}


@pytest.mark.parametrize("importer, is_package, level, module, expected", [
    ("blindspots.a.b", False, 1, "c", "blindspots.a.c"),
    ("blindspots.a", True, 1, "c", "blindspots.a.c"),
    ("blindspots.a.b", False, 2, None, "blindspots"),
])
def test_resolve_relative(importer: str, is_package: bool, level: int, module: str | None, expected: str) -> None:
    assert _resolve(importer, is_package, level, module) == expected


def test_cycle_edges_finds_cycles_only() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e2"}, "e2": set()}
    assert _cycle_edges(graph) == {("a", "b"), ("b", "c"), ("c", "a")}
    assert _package_graph({"blindspots.x.a": {"blindspots.y.b"}, "blindspots.y.b": {"blindspots.x.c"},
                           "blindspots.x.c": set()}) == {"x": {"y"}, "y": {"x"}}
