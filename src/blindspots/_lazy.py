"""Package faces whose names load on first use (PEP 562), for packages whose modules import torch; and the
one callable package, `blindspots.scan`, which is both the scan engine's package and the front door's
`blindspots.scan(pool, ...)`."""
from __future__ import annotations

import importlib
import sys
import types
from typing import Any, Callable, Mapping


def lazy_names(package: str, sources: Mapping[str, str], namespace: dict[str, Any],
               subpackages: tuple[str, ...] = ()) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`: `sources` maps each public name to the module that defines it;
    a name is imported on first access and kept in `namespace` (the package's globals()), so later look-ups
    skip `__getattr__`. subpackages: names of `package`'s own subpackages that attribute access imports
    (`blindspots.surprise` after a bare `import blindspots`)."""
    def __getattr__(name: str) -> Any:
        if name in subpackages:
            value = importlib.import_module(f"{package}.{name}")
        elif name in sources:
            value = getattr(importlib.import_module(sources[name]), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(sources) | set(subpackages))

    return __getattr__, __dir__


def make_callable(module_name: str, function: str) -> None:
    """Make the module `module_name` callable: calling it calls `function` ('package.module:name'), imported
    on the first call. For a package whose name is also the front door's function of the same name (the
    attribute `blindspots.scan` is the package once any of its modules is imported, so the function has to
    live on the package)."""
    path, _, name = function.partition(":")

    class CallableModule(types.ModuleType):
        def __call__(self, *args: Any, **kwargs: Any) -> Any:
            return getattr(importlib.import_module(path), name)(*args, **kwargs)

    sys.modules[module_name].__class__ = CallableModule
