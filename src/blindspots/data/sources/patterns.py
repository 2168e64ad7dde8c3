"""Shard lists: brace patterns (`shard-{000000..000099}.tar`, `{train,val}.parquet`), globs, or a folder of shards."""
from __future__ import annotations

import posixpath
import re
from typing import Any, Mapping

from blindspots.data.sources.fs import get_fs, storage_error

__all__ = ["ShardFiles", "expand_braces", "list_shards", "shards_fingerprint"]

_BRACE = re.compile(r"\{([^{}]*)\}")
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
MAX_EXPANSION = 10_000_000


def expand_braces(pattern: str) -> list[str]:
    """'a{0..2}b{x,y}' -> ['a0bx', 'a0by', 'a1bx', ...]; numeric ranges keep the first bound's zero padding."""
    m = _BRACE.search(pattern)
    if m is None:
        return [pattern]
    body = m.group(1)
    r = _RANGE.match(body)
    if r:
        lo, hi = int(r.group(1)), int(r.group(2))
        width = len(r.group(1)) if r.group(1).startswith("0") else 0
        step = 1 if hi >= lo else -1
        if abs(hi - lo) + 1 > MAX_EXPANSION:
            raise ValueError(f"pool: expected a brace range of at most {MAX_EXPANSION:,} names, got {{{body}}}")
        options = [str(v).zfill(width) for v in range(lo, hi + step, step)]
    else:
        options = body.split(",")
    head, tail = pattern[:m.start()], pattern[m.end():]
    return [head + o + rest for o in options for rest in expand_braces(tail)]


def _fixed_dir(path: str) -> str:
    """The folder part of a pattern before its first magic character ('b/data/*.parquet' -> 'b/data')."""
    cut = min([i for i in (path.find(c) for c in "*?[{") if i >= 0] or [len(path)])
    return posixpath.dirname(path[:cut]) if cut < len(path) else posixpath.dirname(path)


def list_shards(spec: str, suffix: str, options: Mapping[str, Any]) -> tuple[Any, str, list[str]]:
    """(fs, root path, shard paths sorted) for a shard file, a brace / glob pattern, or a folder of `suffix` files.

    Shards named by a brace pattern are taken as named (a missing one becomes an unreadable shard);
    globs and folders are listed. ValueError (one line) when the store cannot be listed or nothing matches.
    """
    fs, path = get_fs(spec, options)
    root = _fixed_dir(path)
    try:
        if "{" in path:
            shards = []
            for name in expand_braces(path):
                shards.extend(sorted(fs.glob(name)) if any(c in name for c in "*?[") else [name])
        elif any(c in path for c in "*?["):
            shards = sorted(fs.glob(path))
        elif fs.isdir(path):
            root = path.rstrip("/")
            shards = sorted(p for p in fs.find(path, detail=False) if p.lower().endswith(suffix)
                            and not any(part.startswith(".") for part in p[len(root) + 1:].split("/")))
        else:
            fs.info(path)  # a missing single shard, bucket or credentials: said here, in one line
            shards = [path]
    except Exception as exc:  # noqa: BLE001 - any store error is one line naming the pool
        raise storage_error("pool", spec, exc) from None
    if not shards:
        raise ValueError(f"pool: expected {suffix} shards at {spec!r}, got none")
    return fs, root.rstrip("/"), shards


def shards_fingerprint(fs: Any, shards: list[str]) -> str | None:
    """Name, size and etag / mtime of every shard (one `info` each), or None when one cannot be stat'ed."""
    parts = []
    for p in shards:
        try:
            info = fs.info(p)
        except Exception:  # noqa: BLE001 - no stamp: the pool is listed again
            return None
        parts.append(f"{p}|{info.get('size')}|{info.get('ETag') or info.get('mtime') or info.get('LastModified')}")
    return "\n".join(parts)


class ShardFiles:
    """For sources made of shard files (Parquet, tar, Arrow): the filesystem and shard list, listed once from
    `root` by `_shard_paths()` (fs, root path, shard paths); after unpickling only the filesystem is opened
    again (the list travels). Uses the source's `root`, `storage_options`, `_fs`, `_shard_root`, `_shards`."""

    root: str
    storage_options: dict
    _fs: Any
    _shard_root: str
    _shards: list[str]

    def _shard_paths(self) -> tuple[Any, str, list[str]]:
        raise NotImplementedError

    @property
    def fs(self) -> Any:
        if self._fs is None:
            if self._shards:  # unpickled: the shard list travelled, only the filesystem is opened again
                self._fs = get_fs(self.root, self.storage_options)[0]
            else:
                self._fs, self._shard_root, self._shards = self._shard_paths()
        return self._fs

    def shard_name(self, s: int) -> str:
        """Shard s's path relative to the pattern's folder ('train-00000-of-00002.parquet', 'wds/shard-000003.tar')."""
        self.fs
        p, root = self._shards[s], self._shard_root
        return p[len(root) + 1:] if root and p.startswith(root + "/") else posixpath.basename(p)

    def fingerprint(self) -> str | None:
        self.fs
        return shards_fingerprint(self.fs, self._shards)
