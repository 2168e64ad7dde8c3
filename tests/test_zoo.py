"""The model zoo: every architecture builds offline, round-trips through a checkpoint and predicts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from blindspots.data.classes import Classes
from blindspots.data.scenes import SCENE_CLASSES
from blindspots.models.adapters import TorchSegmenter
from blindspots.models.zoo import (
    ZOO,
    ZOO_DESCRIPTIONS,
    build_model,
    load_checkpoint,
    load_segmenter,
    save_checkpoint,
)

torch.set_num_threads(1)
C = SCENE_CLASSES.num_classes


def test_zoo_has_different_designs() -> None:
    assert len(ZOO) >= 4
    assert set(ZOO_DESCRIPTIONS) == set(ZOO)
    families = {"lraspp_mnv3", "deeplabv3_mnv3", "pspnet_r18", "unet_mnv2", "tiny_unet"}
    assert families <= set(ZOO)


@pytest.mark.parametrize("arch", sorted(ZOO))
def test_build_save_load_predict(arch: str, tmp_path) -> None:
    torch.manual_seed(0)
    module = build_model(arch, C).eval()
    images = np.random.default_rng(0).integers(0, 256, (2, 40, 56, 3), dtype=np.uint8)  # not a stride multiple
    before = TorchSegmenter(module, C).predict_proba(images)
    path = save_checkpoint(tmp_path / f"{arch}.pt", module, arch=arch, classes=SCENE_CLASSES,
                           meta={"epochs": 0, "note": "untrained"})
    seg = load_segmenter(path, batch_size=1)
    proba = seg.predict_proba(images)
    assert proba.shape == (2, C, 40, 56) and proba.dtype == np.float32
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-4)
    np.testing.assert_allclose(proba, before, atol=1e-5)
    assert seg.classes == SCENE_CLASSES and seg.info["arch"] == arch
    _, info = load_checkpoint(path)
    assert info["meta"] == {"epochs": 0, "note": "untrained"} and info["num_classes"] == C


def test_models_train_mode_gives_logits_at_input_size() -> None:
    x = torch.randn(2, 3, 32, 48)
    for arch in ("tiny_unet", "small_fcn", "lraspp_mnv3"):
        out = build_model(arch, 5).train()(x)
        assert isinstance(out, torch.Tensor) and out.shape == (2, 5, 32, 48)


def test_bad_inputs(tmp_path) -> None:
    with pytest.raises(ValueError, match="name"):
        build_model("resnet9000", C)
    with pytest.raises(ValueError, match="num_classes"):
        build_model("tiny_unet", 1)
    module = build_model("small_fcn", 3)
    with pytest.raises(ValueError, match="arch"):
        save_checkpoint(tmp_path / "x.pt", module, arch="nope", classes=Classes(("a", "b", "c")))
    junk = tmp_path / "junk.pt"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match="path"):
        load_checkpoint(junk)
    with pytest.raises(ValueError, match="path"):
        load_checkpoint(tmp_path / "missing.pt")
    state = save_checkpoint(tmp_path / "state.pt", module, arch=None, classes=None)
    with pytest.raises(ValueError, match="training-state"):
        load_segmenter(state)


def test_cli_list() -> None:
    from typer.testing import CliRunner

    from blindspots.cli import app

    res = CliRunner().invoke(app, ["zoo", "list"])
    assert res.exit_code == 0, res.output
    for name in ZOO:
        assert name in res.output
