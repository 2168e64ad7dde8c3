"""Image ids and the ONE rule that turns an id into a file name.

An image id is the image's path relative to its pool (or dataset) root, with '/' separators and
its extension: ``"street/cat.jpg"``. Everything derived from an image — a scan's argmax map, a
human mask, an export, a review layer — is stored under the id with its extension replaced:
``artifact_name("street/cat.jpg") == "street/cat.png"``. So a scan's maps folder can be handed to
label-issues as a masks folder, and a user's masks named by stem pair with their images.

Before this rule, scan maps and project masks were named ``id + ".png"`` ("cat.jpg.png");
`find_artifact` still finds files written that way, so old projects keep working.
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Iterable

import numpy as np
import pyarrow.compute as pc

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["check_image_id", "artifact_name", "legacy_artifact_name", "artifact_path", "find_artifact",
           "check_unique_artifacts", "stem_key"]


def check_image_id(image_id: object, name: str = "image_id") -> str:
    """The id as a str; a ValueError naming `name` unless it is a relative path inside its root."""
    if not isinstance(image_id, str) or not image_id or image_id != image_id.strip():
        raise ValueError(f"{name}: expected a non-empty relative path, got {image_id!r}")
    p = PurePosixPath(image_id)
    if p.is_absolute() or ".." in p.parts or "\\" in image_id or "\x00" in image_id:
        raise ValueError(f"{name}: expected a relative path inside the folder, got {image_id!r}")
    return image_id


def stem_key(image_id: str) -> str:
    """The id without its extension ("a/cat.jpg" -> "a/cat"); ids without one ("d.tar#k7") are returned as is."""
    p = PurePosixPath(check_image_id(image_id))
    # an item inside a shard ('train.parquet#000017', 'shard-0.tar#a/b') has no extension of its own
    return str(p.with_suffix("")) if p.suffix and "#" not in p.suffix else str(p)


def artifact_name(image_id: str, suffix: str = ".png") -> str:
    """Relative file name of anything derived from `image_id`: extension replaced by `suffix`."""
    return stem_key(image_id) + suffix


def legacy_artifact_name(image_id: str, suffix: str = ".png") -> str:
    """The name used before the one rule (id + suffix), read for old scans and projects."""
    return check_image_id(image_id) + suffix


def artifact_path(root: str | Path, image_id: str, suffix: str = ".png") -> Path:
    """`root / artifact_name(image_id, suffix)`: where a new artifact is written."""
    return Path(root) / artifact_name(image_id, suffix)


def find_artifact(root: str | Path, image_id: str, suffix: str = ".png") -> Path | None:
    """The existing artifact of `image_id` under `root` (the rule's name, then the legacy name), or None."""
    for name in (artifact_name(image_id, suffix), legacy_artifact_name(image_id, suffix)):
        path = Path(root) / name
        if path.is_file():
            return path
    return None


def _stem_clash_candidates(ids: "pa.Array") -> list[str]:
    """Ids of an Arrow array whose stems may clash, found in Arrow (no Python string per id); the
    stem rule is `stem_key`'s: the last name's '.ext' removed unless the name starts with it or it has '#'."""
    stems = pc.replace_substring_regex(pc.replace_substring_regex(ids, "/+", "/"), r"([^/])\.[^./#]+$", r"\1")
    order = pc.sort_indices(stems)
    stems = stems.take(order)
    if len(stems) < 2:
        return []
    same = pc.equal(stems.slice(1), stems.slice(0, len(stems) - 1)).to_numpy(zero_copy_only=False)
    if not same.any():
        return []

    at = np.flatnonzero(same)
    rows = np.unique(np.concatenate([at, at + 1]))
    return ids.take(order.take(rows)).to_pylist()


def check_unique_artifacts(image_ids: Iterable[str], name: str = "image_ids") -> None:
    """ValueError naming the clashing ids when two ids share an artifact name ("a.jpg" and "a.png").
    An Arrow string array (a large pool's ids) is checked in Arrow first."""
    if type(image_ids).__module__.startswith("pyarrow"):
        image_ids = _stem_clash_candidates(image_ids)  # type: ignore[arg-type]
    by_name: dict[str, list[str]] = defaultdict(list)
    for i in image_ids:
        by_name[stem_key(i)].append(i)
    clashes = [sorted(v) for v in by_name.values() if len(v) > 1]
    if clashes:
        shown = "; ".join(", ".join(c) for c in clashes[:5])
        raise ValueError(f"{name}: expected ids whose names differ without the extension (their masks and maps "
                         f"share one file name), got {len(clashes)} clash(es): {shown} (rename one of each)")
