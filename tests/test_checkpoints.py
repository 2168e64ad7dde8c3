"""The one checkpoint format (models/checkpoints.py): weights only, a format tag, a one-line error otherwise."""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from blindspots.models.checkpoints import (
    load_checkpoint_dict,
    load_state_dict,
    load_weights,
    save_checkpoint_dict,
    save_state_dict,
)


class Stranger:  # a class a pickled checkpoint would need to run
    def __init__(self) -> None:
        self.x = 1


def test_round_trip_and_format(tmp_path: Path) -> None:
    path = save_checkpoint_dict(tmp_path / "a" / "c.pt", {"w": torch.ones(2), "meta": {"k": [1, 2.5, "s"]}}, format="t/1")
    ckpt = load_checkpoint_dict(path, format="t/1")
    assert ckpt["format"] == "t/1" and ckpt["meta"] == {"k": [1, 2.5, "s"]} and torch.equal(ckpt["w"], torch.ones(2))
    assert not (tmp_path / "a" / "c.pt.tmp").exists()
    with pytest.raises(ValueError, match="other/1"):
        load_checkpoint_dict(path, format="other/1")
    assert load_checkpoint_dict(path, format=("other/1", "t/1"))["format"] == "t/1"


def test_legacy_untagged_files(tmp_path: Path) -> None:
    torch.save({"arch": "x", "state_dict": {}}, tmp_path / "old.pt")
    assert load_checkpoint_dict(tmp_path / "old.pt", format="t/1", legacy_keys=("arch", "state_dict"))["arch"] == "x"
    with pytest.raises(ValueError, match="t/1"):
        load_checkpoint_dict(tmp_path / "old.pt", format="t/1")  # untagged, not accepted
    with pytest.raises(ValueError, match="t/1"):
        load_checkpoint_dict(tmp_path / "old.pt", format="t/1", legacy_keys=("net",))


@pytest.mark.parametrize("content", ["random", "stranger", "empty"])
def test_bad_files_give_one_line_value_errors(tmp_path: Path, content: str) -> None:
    path = tmp_path / "bad.pt"
    if content == "random":
        path.write_bytes(np.random.default_rng(0).bytes(300))
    elif content == "stranger":
        torch.save({"model": Stranger()}, path)
        assert pickle.loads(pickle.dumps(Stranger())).x == 1
    else:
        path.write_bytes(b"")
    with pytest.raises(ValueError, match="checkpoint_path") as err:
        load_checkpoint_dict(path, format="t/1", argument="checkpoint_path")
    msg = str(err.value)
    assert "\n" not in msg and "bad.pt" in msg and len(msg) < 400
    if content == "stranger":
        assert "Stranger" in msg  # the class it would have run, named
    with pytest.raises(ValueError, match="existing"):
        load_checkpoint_dict(tmp_path / "missing.pt", format="t/1")


def test_state_dicts_new_and_bare(tmp_path: Path) -> None:
    m = nn.Linear(3, 2)
    save_state_dict(tmp_path / "s.pt", m.state_dict())
    torch.save(m.state_dict(), tmp_path / "bare.pt")  # a file from before the format
    for name in ("s.pt", "bare.pt"):
        m2 = load_weights(nn.Linear(3, 2), tmp_path / name)
        assert torch.equal(m2.weight, m.weight)
    torch.save({"a": 1}, tmp_path / "notstate.pt")
    with pytest.raises(ValueError, match="state dict"):
        load_state_dict(tmp_path / "notstate.pt")
