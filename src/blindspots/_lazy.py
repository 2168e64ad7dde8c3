"""Package faces whose names load on first use (PEP 562), for packages whose modules import torch."""
from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_names(package: str, sources: Mapping[str, str],
               namespace: dict[str, Any]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package`: `sources` maps each public name to the module that defines it;
    a name is imported on first access and kept in `namespace` (the package's globals()), so later look-ups
    skip `__getattr__`."""
    def __getattr__(name: str) -> Any:
        if name not in sources:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(sources[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(sources))

    return __getattr__, __dir__
