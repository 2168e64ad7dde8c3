"""The score table's column names: the one place they are spelled.

A score table (`blindspots.scan.read_score_table`) has one row per image id and these columns:

    id, status ('ok'|'error'), error, width, height, content_hash   META_COLUMNS
    frac__{M}__{k}      float32  pixel fraction of class k in model M's argmax map
    entropy__{M}        float32  mean per-pixel entropy of M's probabilities (nats)
    maxprob__{M}        float32  mean per-pixel maximum probability of M
    dpa__{T}__{G}       float64  1 - pixel agreement of target T's and competitor G's maps
    dmiou__{T}__{G}     float64  1 - mIoU of the two maps
    surprise_{kind}__{M}[__{k}]  float32  surprise adequacy (extra part, `blindspots.surprise`)

Model names match [a-z0-9_]+ without "__" (the separator), so every name parses back.
Model shards on disk also hold `error__{M}` (why M failed on an image); `read_score_table`
folds it into `status`/`error` and never returns it.
"""
from __future__ import annotations

import re
from typing import Iterable

ID, STATUS, ERROR, WIDTH, HEIGHT, CONTENT_HASH = "id", "status", "error", "width", "height", "content_hash"
META_COLUMNS = (ID, STATUS, ERROR, WIDTH, HEIGHT, CONTENT_HASH)
STATUS_OK, STATUS_ERROR = "ok", "error"
SEP = "__"
MODEL_PREFIXES = ("frac", "entropy", "maxprob", "error")  # per-model columns
PAIR_KINDS = ("dpa", "dmiou")  # per (target, competitor) columns
SURPRISE_KINDS = ("mdsa", "lsa", "dsa")
# column names an extra part may not take (they belong to the scan)
RESERVED = META_COLUMNS
RESERVED_PREFIXES = tuple(p + SEP for p in MODEL_PREFIXES + PAIR_KINDS)

MODEL_NAME = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")  # contract [a-z0-9_]+, minus "__"
_FRAC_RE = re.compile(r"^frac__([a-z0-9_]+?)__(\d+)$")
_PAIR_RE = re.compile(r"^(dpa|dmiou)__([a-z0-9_]+?)__([a-z0-9_]+)$")


def check_model_name(name: str, arg: str = "models") -> str:
    """ValueError unless `name` matches [a-z0-9_]+ without leading/trailing/double underscores."""
    if not isinstance(name, str) or not MODEL_NAME.match(name):
        raise ValueError(f"{arg}: expected model names of lowercase letters, digits and single underscores "
                         f"(e.g. 'deeplab_r50'), got {name!r}")
    return name


def frac(model: str, k: int) -> str:
    """Pixel fraction of class k in `model`'s argmax map."""
    return f"frac{SEP}{model}{SEP}{int(k)}"


def entropy(model: str) -> str:
    return f"entropy{SEP}{model}"


def maxprob(model: str) -> str:
    return f"maxprob{SEP}{model}"


def model_error(model: str) -> str:
    """On-disk column of a model shard: why `model` failed on an image (null when it did not)."""
    return f"error{SEP}{model}"


def confidence(prefix: str, model: str) -> str:
    """`entropy__M` or `maxprob__M` by prefix ("entropy" | "maxprob")."""
    if prefix not in ("entropy", "maxprob"):
        raise ValueError(f"prefix: expected 'entropy' or 'maxprob', got {prefix!r}")
    return f"{prefix}{SEP}{model}"


def pair(kind: str, target: str, competitor: str) -> str:
    """`dpa__T__G` or `dmiou__T__G` by kind."""
    if kind not in PAIR_KINDS:
        raise ValueError(f"kind: expected one of {PAIR_KINDS}, got {kind!r}")
    return f"{kind}{SEP}{target}{SEP}{competitor}"


def dpa(target: str, competitor: str) -> str:
    return pair("dpa", target, competitor)


def dmiou(target: str, competitor: str) -> str:
    return pair("dmiou", target, competitor)


def pair_folder(target: str, competitor: str) -> str:
    """Folder name of a (target, competitor) pair part: `T__G`."""
    return f"{target}{SEP}{competitor}"


def surprise(kind: str, model: str, class_id: int | None = None) -> str:
    """`surprise_{kind}__M` (image SA) or `surprise_{kind}__M__k` (class SA of class k)."""
    name = f"surprise_{kind}{SEP}{model}"
    return name if class_id is None else f"{name}{SEP}{int(class_id)}"


def surprise_models(columns: Iterable[object], kind: str) -> list[str]:
    """Models M with an image-SA column `surprise_{kind}__M`, in column order."""
    pat = re.compile(rf"^surprise_{re.escape(kind)}__([a-z0-9_]+?)$")
    return [m.group(1) for c in columns if (m := pat.match(str(c))) and SEP not in m.group(1)]


def frac_models(columns: Iterable[object]) -> dict[str, list[int]]:
    """Models with `frac__M__k` columns -> their sorted class ids."""
    out: dict[str, list[int]] = {}
    for c in columns:
        m = _FRAC_RE.match(str(c))
        if m:
            out.setdefault(m.group(1), []).append(int(m.group(2)))
    return {k: sorted(v) for k, v in out.items()}


def distance_pairs(columns: Iterable[object], kind: str) -> list[tuple[str, str]]:
    """(target, competitor) pairs with a `{kind}__T__G` column, in column order."""
    out = []
    for c in columns:
        m = _PAIR_RE.match(str(c))
        if m and m.group(1) == kind:
            out.append((m.group(2), m.group(3)))
    return out


def confidence_models(columns: Iterable[object], prefix: str) -> list[str]:
    """Models with a `{prefix}__M` column (prefix "entropy" or "maxprob"), in column order."""
    head = prefix + SEP
    return [str(c)[len(head):] for c in columns if str(c).startswith(head) and SEP not in str(c)[len(head):]]
