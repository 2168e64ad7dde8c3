"""Paths inside a scan folder (`out_dir`)::

    scan.json                              manifest (`blindspots.scan.manifest`)
    meta/shard-00000.parquet               id, status, error, width, height, content_hash
    models/<M>/shard-00000.parquet         id, frac__<M>__<k>, entropy__<M>, maxprob__<M>, error__<M>
    pairs/<T>__<G>/shard-00000.parquet     id, dpa__<T>__<G>, dmiou__<T>__<G>
    maps/<M>/<artifact name of id>         argmax map of model M (index PNG; "a/cat.jpg" -> "a/cat.png",
                                           scans before the ids rule wrote "a/cat.jpg.png": still read)
    extra/<P>/shard-00000.parquet          float columns added after the scan (`blindspots.scan.extra`)

Shard k holds the rows of ids[k*S:(k+1)*S] of the sorted scan ids (S = shard size), in id order.
"""
from __future__ import annotations

from pathlib import Path

from blindspots import ids as id_rules
from blindspots.scan import schema

MANIFEST = "scan.json"


def shard_file(k: int) -> str:
    return f"shard-{k:05d}.parquet"


class ScanLayout:
    """Paths inside a scan folder."""

    def __init__(self, out_dir: str | Path) -> None:
        self.root = Path(out_dir)

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    def meta_shard(self, k: int) -> Path:
        return self.root / "meta" / shard_file(k)

    def model_shard(self, model: str, k: int) -> Path:
        return self.root / "models" / model / shard_file(k)

    def pair_shard(self, target: str, competitor: str, k: int) -> Path:
        return self.root / "pairs" / schema.pair_folder(target, competitor) / shard_file(k)

    def extra_shard(self, part: str, k: int) -> Path:
        return self.root / "extra" / part / shard_file(k)

    def extra_parts(self) -> list[str]:
        """Names of the extra column parts present (complete or not), sorted."""
        root = self.root / "extra"
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def maps_dir(self, model: str) -> Path:
        return self.root / "maps" / model

    def map_path(self, model: str, image_id: str) -> Path:
        """Where the map of `image_id` is written: the ids rule (extension replaced by .png)."""
        return id_rules.artifact_path(self.maps_dir(model), image_id)

    def find_map(self, model: str, image_id: str) -> Path | None:
        """The saved map of `image_id` (the ids rule's name, or the legacy `id + '.png'`), or None."""
        return id_rules.find_artifact(self.maps_dir(model), image_id)


def find_map(scan_dir: str | Path, model: str, image_id: str) -> Path | None:
    """The saved argmax map of `image_id` by `model` in a scan folder (new or legacy name), or None."""
    return ScanLayout(scan_dir).find_map(model, image_id)
