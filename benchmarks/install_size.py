"""Installed size of blindspots with a set of extras, measured in an environment that has them all installed.

    python benchmarks/install_size.py            # the core, then [app], [all], [dev]
    python benchmarks/install_size.py all hf     # named extras

Resolves the requirements of `blindspots[EXTRAS]` as this checkout's pyproject.toml states them, then through
the installed distributions' metadata (markers evaluated, extras followed) and adds up the files each distribution's RECORD lists. The figure is what
`pip install` would put in site-packages at these versions (torch's build included: a CUDA build carries its
nvidia-* libraries, a CPU build does not). Prints one line per set: MiB and the number of distributions.
"""
from __future__ import annotations

import sys
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]


def _requires(name: str) -> list[str]:
    """The requirement lines of distribution `name`; blindspots' own from pyproject.toml (the installed copy's
    metadata may be older), with `; extra == "x"` markers as in a wheel's METADATA."""
    if name != "blindspots":
        return metadata.distribution(name).requires or []
    lines = list(PYPROJECT["dependencies"])
    for extra, reqs in PYPROJECT["optional-dependencies"].items():
        for r in reqs:
            req = Requirement(r)
            marker = f'extra == "{extra}"' if req.marker is None else f'({req.marker}) and extra == "{extra}"'
            req.marker = None
            lines.append(f"{req}; {marker}")
    return lines


def closure(extras: list[str], root: str = "blindspots") -> set[str]:
    """Canonical names of every installed distribution `root[extras]` needs (root itself included)."""
    seen: set[str] = set()
    todo = [(root, frozenset(extras))]
    done: set[tuple[str, frozenset]] = set()
    while todo:
        name, ex = todo.pop()
        if (name, ex) in done:
            continue
        done.add((name, ex))
        try:
            requires = _requires(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or an extra not installed here
        seen.add(canonicalize_name(name))
        for line in requires:
            req = Requirement(line)
            envs = [{"extra": e} for e in ex] or [{"extra": ""}]
            if req.marker is None or any(req.marker.evaluate(env) for env in envs):
                todo.append((canonicalize_name(req.name), frozenset(req.extras)))
    return seen


def size_mib(names: set[str]) -> float:
    """MiB of the files the RECORDs of `names` list (blindspots' own sources too, editable or not)."""
    total = 0
    for name in names:
        dist = metadata.distribution(name)
        for f in dist.files or []:
            p = Path(str(dist.locate_file(f)))
            if p.is_file():
                total += p.stat().st_size
    return total / 2**20


def main(argv: list[str]) -> None:
    sets = [[e] for e in argv] if argv else [[], ["app"], ["all"], ["dev"]]
    torch = closure([], "torch")
    print(f"torch {metadata.version('torch')} and what it needs: {size_mib(torch):,.0f} MiB in {len(torch)} "
          f"distributions (counted in each line below)")
    for extras in sets:
        names = closure(extras)
        label = f"blindspots[{','.join(extras)}]" if extras else "blindspots (core)"
        print(f"{label}: {size_mib(names):,.0f} MiB in {len(names)} distributions; without torch "
              f"{size_mib(names - torch):,.0f} MiB")


if __name__ == "__main__":
    main(sys.argv[1:])
