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
    **dict.fromkeys(["cli", "app", "workflows", "__main__", "__init__"], 3),
    **dict.fromkeys(["loop", "report", "integrations"], 2),
    **dict.fromkeys(["scan", "mine", "surprise", "labels", "defuse", "scenarios", "human", "training"], 1),
    **dict.fromkeys(["models", "data", "metrics", "ids", "_validation", "config", "allocator", "atomic", "batches", "machine",
                     "_lazy", "extras"], 0),
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


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (isinstance(t, ast.Attribute)
                                                                    and t.attr == "TYPE_CHECKING")


def lazy_face_names(mods: dict[str, Path]) -> dict[str, dict[str, str]]:
    """face -> {name: the module that defines it} for package faces whose names load on first use
    (`blindspots._lazy.lazy_names`): their `if TYPE_CHECKING:` imports say where each name comes from, and
    `from face import name` runs that module's import."""
    out: dict[str, dict[str, str]] = {}
    for face, path in mods.items():
        if path.name != "__init__.py" or "lazy_names(" not in (text := path.read_text()):
            continue
        names: dict[str, str] = {}
        for node in ast.parse(text).body:
            if isinstance(node, ast.If) and _is_type_checking(node):
                for s in node.body:
                    if isinstance(s, ast.ImportFrom) and s.module:
                        names.update({a.asname or a.name: _resolve(face, True, s.level, s.module) for a in s.names})
        out[face] = names
    return out


_LAZY_FACES: dict[tuple[str, ...], dict[str, dict[str, str]]] = {}  # by the modules' names


def _lazy_faces(mods: dict[str, Path]) -> dict[str, dict[str, str]]:
    key = tuple(sorted(mods))
    if key not in _LAZY_FACES:
        _LAZY_FACES[key] = lazy_face_names(mods)
    return _LAZY_FACES[key]


def _imports_of(name: str, path: Path, node: ast.Import | ast.ImportFrom, mods: dict[str, Path]) -> list[str]:
    """What an import statement imports: package modules by module name (`from pkg import sub` imports the module
    pkg.sub when there is one, else a name of pkg, or the module a lazy face loads that name from; `import a.b.c`
    of a name inside a module: its module), other packages by dotted name."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    else:
        base = _resolve(name, path.name == "__init__.py", node.level, node.module)
        lazy = {} if base == name else _lazy_faces(mods).get(base, {})
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else lazy.get(a.name, base) for a in node.names]
    out = []
    for t in targets:
        if t.startswith(ROOT + "."):
            while t and t not in mods:
                t = t.rpartition(".")[0]
        out.append(t)
    return out


def import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (anywhere in the file, function bodies included)."""
    mods = _modules()
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                graph[name] |= {t for t in _imports_of(name, path, node, mods)
                                if t.startswith(ROOT + ".") and t != name}
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


#: (cli module, module below a face) imports still to be routed through the face, each with why not yet: the face
#: would load a package that commands sharing it must start without
KNOWN_CLI_PAST_FACE: dict[tuple[str, str], str] = {
    ("blindspots.cli.defuse", "blindspots.defuse.identify"): "the face's `identify` is shadowed by its module's name",
    ("blindspots.cli.labelstudio", "blindspots.integrations.labelstudio.webhook"): "the face would import FastAPI",
    ("blindspots.cli.mine", "blindspots.mine.model_columns.acquisition"): "the face would import torch",
    ("blindspots.cli.surprise", "blindspots.surprise.analysis"): "the face would import matplotlib and scipy",
    ("blindspots.cli.surprise", "blindspots.surprise.views"): "the face would import imageio and matplotlib",
    ("blindspots.cli.web", "blindspots.app.tables"): "the app's face imports FastAPI (`annotators`, `sets` need not)",
}
#: cli modules that still compute (import an array or table library) rather than parse, call and print
KNOWN_CLI_COMPUTING: set[str] = {"blindspots.cli.web"}
#: what computing takes: a module of cli/ importing one of these holds a domain rule that belongs in the library
COMPUTING = frozenset({"numpy", "pandas", "torch", "scipy", "sklearn", "pyarrow"})


def faces(mods: dict[str, Path]) -> set[str]:
    """The modules another package may import: every package's `__init__` (a package face) and every top-level
    module (`blindspots.config`, `blindspots.metrics`, ...: a module of its own is its face)."""
    return {m for m, p in mods.items() if p.name == "__init__.py"} | {m for m in mods if m.count(".") == 1}


def cli_past_faces(mods: dict[str, Path] | None = None) -> set[tuple[str, str]]:
    """(cli module, what it imports) for each import, written in cli/, of a package module that is not a face."""
    mods = mods if mods is not None else _modules()
    ok = faces(mods)
    found: set[tuple[str, str]] = set()
    for name, path in mods.items():
        if not name.startswith(f"{ROOT}.cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            written = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                       [_resolve(name, path.name == "__init__.py", node.level, node.module)]
                       if isinstance(node, ast.ImportFrom) else [])
            found |= {(name, w) for w in written if w.startswith(ROOT + ".") and w in mods and w not in ok
                      and not w.startswith(f"{ROOT}.cli")}
    return found


def test_cli_imports_only_package_faces() -> None:
    found = cli_past_faces()
    assert found - set(KNOWN_CLI_PAST_FACE) == set(), "cli/ imports a module below a package face: import the face"
    assert set(KNOWN_CLI_PAST_FACE) <= found, "a known exception no longer occurs: remove it from KNOWN_CLI_PAST_FACE"


def test_cli_computes_nothing() -> None:
    """cli/ parses, calls the library and prints: a cli module that imports an array or table library computes."""
    top, inner = split_imports()
    uses = {m: {t.split(".")[0] for t in top[m] | {t for n, _, t in inner if n == m}} for m in top}
    computing = {m for m, ts in uses.items() if m.startswith(f"{ROOT}.cli") and ts & COMPUTING}
    assert computing - KNOWN_CLI_COMPUTING == set(), "cli/ computes: move the rule into the library and call it"
    assert KNOWN_CLI_COMPUTING <= computing, "a known exception no longer occurs: remove it from KNOWN_CLI_COMPUTING"


def test_cli_past_faces_finds_submodule_imports(tmp_path: Path) -> None:
    pkg = tmp_path / ROOT
    for f, text in {"__init__.py": "", "cli/__init__.py": "", "cli/a.py": "from blindspots.eng.inner import x\n"
                    "from blindspots.eng import y\nfrom blindspots import config\n", "eng/__init__.py": "",
                    "eng/inner.py": "x = y = 1\n", "config.py": ""}.items():
        (pkg / f).parent.mkdir(parents=True, exist_ok=True)
        (pkg / f).write_text(text)
    mods = {".".join(p.relative_to(tmp_path).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(pkg.rglob("*.py"))}
    assert cli_past_faces(mods) == {("blindspots.cli.a", "blindspots.eng.inner")}


def test_a_name_of_a_lazy_face_is_an_import_of_its_module() -> None:
    assert lazy_face_names(_modules())["blindspots.defuse"]["ReviewFolder"] == "blindspots.defuse.review_folder"
    assert "blindspots.defuse.review_folder" in GRAPH["blindspots.cli.defuse"]  # `from blindspots.defuse import ...`
    assert "blindspots.workflows" in GRAPH["blindspots"]  # the front door's names


def test_graph_sees_function_level_imports() -> None:
    assert "blindspots.models.load" in GRAPH["blindspots.cli.scan"]  # imported inside `scan`


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


def _write_modules(folder: Path, files: dict[str, str]) -> dict[str, Path]:
    """module name -> a file holding its text, for the checkers' own tests."""
    mods = {}
    for name, text in files.items():
        mods[name] = folder / (name.replace(".", "_") + ".py")
        mods[name].write_text(text)
    return mods


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
    mods = _write_modules(tmp_path, files)
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


# --- imports inside functions -------------------------------------------------------------------------------------
#: Imported inside a function anywhere: optional packages (an extra, one model format or one file format needs them)
#: and numba (importing it, then compiling or loading the JIT kernels, is paid by the first call that needs them).
OPTIONAL = frozenset({"ray", "fiftyone", "label_studio_sdk", "s3fs", "moto", "playwright", "transformers",
                      "onnxruntime", "onnx", "nibabel", "segmentation_models_pytorch", "torchvision",
                      "swagger_ui_bundle", "datasets", "numba"})
#: Core packages (or modules) slow to import (0.3-2 s each on 2 busy cores; fsspec and pyarrow.parquet 0.1-0.4 s)
#: or absent from the GPU image (tests/test_gpu_imports.py): imported inside a function only by modules that must
#: start without them (LIGHT_START_ROOTS).
SLOW = frozenset({"torch", "matplotlib", "scipy", "sklearn", "skimage", "pandas", "fastapi", "uvicorn", "httpx",
                  "duckdb", "jinja2", "imageio", "threadpoolctl", "fsspec", "pyarrow.parquet"})
#: What must start without the SLOW packages (with what they import at module level): `blindspots --help` (every
#: module under cli/, which imports each command group), the loop's face (the bookkeeping commands: status,
#: ratings, masks, export, ...), the web app, the Label Studio commands, the scan and its Ray workers
#: (tests/test_scan_imports.py), the model loader on the GPU image (tests/test_gpu_imports.py).
LIGHT_START_ROOTS = ("blindspots.cli.*", "blindspots.loop", "blindspots.app.main",
                     "blindspots.integrations.labelstudio.*", "blindspots.scan", "blindspots.scan.engines.local",
                     "blindspots.scan.engines.ray", "blindspots.scan.engines.forward", "blindspots.scan.engines.rows",
                     "blindspots.scan.engines.pipeline", "blindspots.data.sources.folder", "blindspots.models.load",
                     "blindspots.models.adapters.hf")
#: (importer, imported) function-level imports that break an import cycle, with the reason
CYCLE_BREAKS: dict[tuple[str, str], str] = {}


def split_imports(mods: dict[str, Path] | None = None) -> tuple[dict[str, set[str]], list[tuple[str, int, str]]]:
    """(module -> what it imports at module level, [(module, line, imported) for every import inside a function]).
    Imports under `if TYPE_CHECKING:` are neither (they never run)."""
    mods = mods if mods is not None else _modules()
    top: dict[str, set[str]] = {m: set() for m in mods}
    inner: list[tuple[str, int, str]] = []
    for name, path in mods.items():
        def visit(stmts: list[ast.stmt], in_function: bool) -> None:
            for s in stmts:
                if isinstance(s, (ast.Import, ast.ImportFrom)):
                    for t in _imports_of(name, path, s, mods):
                        if in_function:
                            inner.append((name, s.lineno, t))
                        else:
                            top[name].add(t)
                elif isinstance(s, ast.If) and _is_type_checking(s):
                    continue
                else:
                    function = in_function or isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
                    for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                        for child in getattr(s, field, []):
                            visit([child] if isinstance(child, ast.stmt) else getattr(child, "body", []), function)
        visit(ast.parse(path.read_text(), str(path)).body, False)
    return top, inner


def top_level_closure(top: dict[str, set[str]], start: str) -> set[str]:
    """Every package module and outside package name that importing `start` imports (its packages' __init__ too)."""
    seen: set[str] = set()
    stack = [start]
    while stack:
        m = stack.pop()
        if m in seen:
            continue
        seen.add(m)
        parts = m.split(".")
        stack.extend(".".join(parts[:k]) for k in range(1, len(parts)))
        stack.extend(top.get(m, ()))
    return seen


def _listed(names: set[str], listed: frozenset[str]) -> set[str]:
    """The entries of `listed` (packages, or modules such as pyarrow.parquet) that `names` import."""
    return {e for e in listed for n in names if n == e or n.startswith(e + ".")}


def lazy_import_problems(mods: dict[str, Path] | None = None,
                         light_roots: tuple[str, ...] = LIGHT_START_ROOTS) -> list[str]:
    """Each function-level import that defers nothing heavy (it belongs at module level), and each module whose lazy
    imports are not named in a `# Lazy imports: ...` comment above its first definition."""
    mods = mods if mods is not None else _modules()
    top, inner = split_imports(mods)
    roots = {m for r in light_roots for m in mods
             if m == r or (r.endswith(".*") and (m == r[:-2] or m.startswith(r[:-1])))}
    light = set().union(*(top_level_closure(top, r) for r in roots))
    problems: list[str] = []
    deferred: dict[str, set[str]] = {}
    for name, line, target in inner:
        where = f"{name}:{line} imports {target}"
        if (name, target) in CYCLE_BREAKS:
            deferred.setdefault(name, set())
            continue
        allowed = OPTIONAL | (SLOW if name in light else set())
        mine = _listed(top_level_closure(top, name), OPTIONAL | SLOW)
        reached = _listed(top_level_closure(top, target) if target.startswith(ROOT) else {target}, OPTIONAL | SLOW)
        heavy = (reached & allowed) - mine
        if not heavy:
            why = ("it defers no heavy package" if not reached else
                   "what it imports is imported at module level already" if reached <= mine else
                   f"{sorted(reached - mine)} may be imported inside functions only in {sorted(light_roots)} and "
                   "what they import at module level")
            problems.append(f"{where}: move it to module level ({why})")
        else:
            deferred.setdefault(name, set()).update(heavy)
    for name, packages in sorted(deferred.items()):
        text = mods[name].read_text()
        tree = ast.parse(text)
        first_def = min((s.lineno for s in tree.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                            ast.ClassDef))), default=10**9)
        header = "\n".join(text.splitlines()[: first_def - 1])
        comment = next((l for l in header.splitlines() if l.lower().startswith("# lazy imports")), None)
        if comment is None:
            problems.append(f"{name}: no '# Lazy imports: ...' comment above the first "
                            f"definition naming {sorted(packages)}")
        elif packages and not any(p in comment for p in packages):
            problems.append(f"{name}: the '# Lazy imports' comment names none of {sorted(packages)}")
    return problems


def test_function_level_imports_only_defer_heavy_packages() -> None:
    problems = lazy_import_problems()
    assert problems == [], "\n".join(problems)


def test_lazy_import_problems_finds_imports_that_defer_nothing(tmp_path: Path) -> None:
    files = {
        "blindspots.cli.a": "# Lazy imports: torch (`blindspots --help` starts without it).\nimport json\n\n\n"
                            "def f():\n    import torch\n    from blindspots.eng.b import g\n",
        "blindspots.eng.b": "import torch\n\n\ndef g():\n    import json\n    import ray\n",
        "blindspots.eng.c": "def h():\n    import pandas\n    from blindspots.eng import b\n",
    }
    mods = _write_modules(tmp_path, files)
    assert lazy_import_problems(mods, light_roots=("blindspots.cli.*",)) == [
        "blindspots.eng.b:5 imports json: move it to module level (it defers no heavy package)",
        "blindspots.eng.c:2 imports pandas: move it to module level (['pandas'] may be imported inside functions only "
        f"in {sorted(('blindspots.cli.*',))} and what they import at module level)",
        "blindspots.eng.c:3 imports blindspots.eng.b: move it to module level (['torch'] may be imported inside "
        f"functions only in {sorted(('blindspots.cli.*',))} and what they import at module level)",
        "blindspots.eng.b: no '# Lazy imports: ...' comment above the first definition naming ['ray']",
    ]
