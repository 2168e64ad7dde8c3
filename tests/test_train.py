"""Training: loss goes down, seeds are deterministic, checkpoints resume exactly, the demo zoo runs."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from blindspots.data.scenes import SCENE_CLASSES, generate_scene_set, render_scene_arrays
from blindspots.models.zoo import build_model, load_segmenter, read_checkpoint
from blindspots.training.segmentation import (
    balanced_class_weights,
    evaluate_segmentation,
    fit_segmenter,
    predict_labels,
    train_segmenter,
)

torch.set_num_threads(1)
C = SCENE_CLASSES.num_classes


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    images, masks, _ = render_scene_arrays(12, seed=0, distribution="train", size=32)
    return images, masks


def fresh(seed: int = 0) -> torch.nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build_model("small_fcn", C)


def weights(m: torch.nn.Module) -> list[torch.Tensor]:
    return [t.detach().clone() for t in m.state_dict().values()]


def test_loss_decreases_and_model_learns(data) -> None:
    res = fit_segmenter(fresh(), data, epochs=5, batch_size=4, lr=5e-3, seed=0, progress=False)
    losses = [h["loss"] for h in res.history]
    assert len(losses) == 5 and losses[-1] < 0.7 * losses[0]
    acc = evaluate_segmentation(predict_labels(res.model, data[0]), data[1], C)["pixel_acc"]
    assert acc > 0.6  # far above the 45% of always predicting road


def test_same_seed_same_weights(data) -> None:
    a = train_segmenter(fresh(), data, epochs=2, batch_size=4, seed=3, progress=False)
    b = train_segmenter(fresh(), data, epochs=2, batch_size=4, seed=3, progress=False)
    c = train_segmenter(fresh(), data, epochs=2, batch_size=4, seed=4, progress=False)
    for x, y in zip(weights(a), weights(b)):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert any(not torch.equal(x, y) for x, y in zip(weights(a), weights(c)))


def test_resume_matches_uninterrupted_run(data, tmp_path) -> None:
    ref = train_segmenter(fresh(), data, epochs=3, batch_size=4, seed=1, progress=False)
    ckpt = tmp_path / "m.pt"
    first = fit_segmenter(fresh(), data, epochs=3, batch_size=4, seed=1, checkpoint_path=ckpt, arch="small_fcn",
                          classes=SCENE_CLASSES, progress=False)
    assert read_checkpoint(ckpt)["train_state"]["epoch"] == 3
    # an interruption after epoch 2: rebuild the checkpoint of epoch 2, then resume in a new model
    part = tmp_path / "part.pt"
    def interrupt(rec: dict) -> None:
        if rec["epoch"] == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        fit_segmenter(fresh(), data, epochs=3, batch_size=4, seed=1, checkpoint_path=part, arch="small_fcn",
                      classes=SCENE_CLASSES, progress=False, on_epoch_end=interrupt)
    assert read_checkpoint(part)["train_state"]["epoch"] == 2
    resumed = fit_segmenter(fresh(seed=99), data, epochs=3, batch_size=4, seed=1, checkpoint_path=part,
                            arch="small_fcn", classes=SCENE_CLASSES, progress=False)
    assert resumed.resumed_from == 2 and [h["epoch"] for h in resumed.history] == [1, 2, 3]
    for x, y, z in zip(weights(ref), weights(first.model), weights(resumed.model)):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
        torch.testing.assert_close(x, z, rtol=0, atol=0)
    meta = read_checkpoint(part)["meta"]
    assert meta["train"]["seed"] == 1 and len(meta["history"]) == 3
    seg = load_segmenter(part)
    assert seg.predict_proba(data[0][:2]).shape == (2, C, 32, 32)
    with pytest.raises(ValueError, match="same training settings"):
        fit_segmenter(fresh(), data, epochs=4, batch_size=4, lr=1e-2, seed=1, checkpoint_path=part,
                      arch="small_fcn", classes=SCENE_CLASSES, progress=False)


def test_segmentation_set_input_and_bad_inputs(tmp_path) -> None:
    ds = generate_scene_set(tmp_path / "s", 4, seed=1, distribution="train", size=32, progress=False)
    model = train_segmenter(fresh(), ds, epochs=1, batch_size=2, seed=0, progress=False)
    assert not model.training
    with pytest.raises(ValueError, match="train_set"):
        train_segmenter(fresh(), (np.zeros((2, 8, 8, 3), np.float32), np.zeros((2, 8, 8), np.uint8)))
    with pytest.raises(ValueError, match="train_set"):
        train_segmenter(fresh(), (np.zeros((2, 8, 8, 3), np.uint8), np.zeros((2, 4, 8), np.uint8)))
    with pytest.raises(ValueError, match="epochs"):
        train_segmenter(fresh(), ds, epochs=0)
    with pytest.raises(ValueError, match="batch_size"):
        train_segmenter(fresh(), ds, batch_size=1)


def test_cli_zoo_train(tmp_path) -> None:
    from typer.testing import CliRunner

    from blindspots.cli import app

    out = tmp_path / "zoo"
    args = ["zoo", "train", "--out", str(out), "--target", "small_fcn", "--competitors", "tiny_unet",
            "--n-train", "6", "--n-val", "3", "--size", "32", "--epochs", "1", "--seed", "2"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "zoo.json").read_text())
    assert summary["target"] == "small_fcn" and summary["competitors"] == ["tiny_unet"]
    for name, role in (("small_fcn", "target"), ("tiny_unet", "competitor")):
        m = summary["models"][name]
        assert m["role"] == role and (out / m["checkpoint"]).is_file()
        assert 0.0 <= m["metrics"]["val_hard"]["miou"] <= 1.0
        ckpt = read_checkpoint(out / m["checkpoint"])
        assert ckpt["meta"]["metrics"] == m["metrics"]
        assert ckpt["meta"]["data"]["distribution"] == ("train" if role == "target" else "broad")
    res = CliRunner().invoke(app, ["zoo", "train", "--out", str(out), "--target", "small_fcn",
                                   "--competitors", "small_fcn"])
    assert res.exit_code != 0 and "competitors" in res.output


def test_balanced_class_weights(data) -> None:
    masks = np.zeros((1, 10, 10), np.uint8)
    masks[0, :2] = 1
    masks[0, 0, 0] = 255
    w = balanced_class_weights(masks, 3)
    assert w.dtype == np.float32 and w.shape == (3,)
    assert w[1] > w[0] and w[2] == 1.0  # rarer class weighs more; an absent class keeps 1
    model = train_segmenter(fresh(), data, epochs=1, batch_size=4, seed=0, progress=False, class_weights="balanced")
    assert not model.training
    with pytest.raises(ValueError, match="class_weights"):
        train_segmenter(fresh(), data, epochs=1, batch_size=4, class_weights="inverse")
    with pytest.raises(ValueError, match="class_weights"):
        train_segmenter(fresh(), data, epochs=1, batch_size=4, class_weights=[1.0, 2.0])
