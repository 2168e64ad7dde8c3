"""Input policies, one-channel outputs, spec options and classes files."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from blindspots.models import CallableSegmenter, InputPolicy, TorchSegmenter
from blindspots.models.spec_syntax import parse_spec

torch.set_num_threads(1)
IMAGES = np.random.default_rng(2).integers(0, 256, (3, 37, 50, 3), dtype=np.uint8)


def _seen_sizes(policy: InputPolicy) -> tuple[list[tuple[int, int]], np.ndarray]:
    seen: list[tuple[int, int]] = []

    def fn(b: np.ndarray) -> np.ndarray:
        seen.append(b.shape[1:3])
        return np.stack([b[..., 0], 255 - b[..., 0]], 1).astype(np.float32)  # logits

    return seen, CallableSegmenter(fn, 2, output="logits", policy=policy).predict_proba(IMAGES)


@pytest.mark.parametrize("policy, model_size", [
    (InputPolicy(), (37, 50)),
    (InputPolicy(resize=(16, 24)), (16, 24)),
    (InputPolicy(pad=32), (64, 64)),
    (InputPolicy(max_side=25), (18, 25)),
    (InputPolicy(max_side=25, pad=8), (24, 32)),
    (InputPolicy(max_side=100), (37, 50)),  # never upscales
])
def test_policy_sizes_and_output_back_at_image_size(policy, model_size):
    seen, p = _seen_sizes(policy)
    assert seen[0] == model_size
    assert p.shape == (3, 2, 37, 50) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(1), 1, atol=1e-5)


def test_pad_crops_back_exactly():
    _, native = _seen_sizes(InputPolicy())
    _, padded = _seen_sizes(InputPolicy(pad=32))
    np.testing.assert_allclose(padded, native, atol=1e-6)  # a per-pixel model: padding changes nothing


def test_policy_rejects_bad_values():
    with pytest.raises(ValueError, match="resize: expected alone"):
        InputPolicy(resize=(8, 8), pad=4)
    with pytest.raises(ValueError, match="pad: expected a positive integer, got 0"):
        InputPolicy(pad=0)
    with pytest.raises(ValueError, match="resize: expected \\(height, width\\)"):
        InputPolicy(resize=(8,))  # type: ignore[arg-type]


def test_one_channel_torch_module_is_binary():
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 1, 1)
    seg = TorchSegmenter(conv)  # num_classes probed: one channel -> 2 classes
    assert seg.num_classes == 2 and seg.classes.names == ("class_0", "class_1")
    p = seg.predict_proba(IMAGES)
    with torch.no_grad():
        from blindspots.models import TorchPreprocess
        ref = torch.sigmoid(conv(TorchPreprocess()(IMAGES))).numpy()[:, 0]
    np.testing.assert_allclose(p[:, 1], ref, atol=1e-6)
    np.testing.assert_allclose(p[:, 0], 1 - ref, atol=1e-6)
    with pytest.raises(ValueError, match="num_classes: expected at least 2"):
        TorchSegmenter(conv, 1)


def test_parse_spec_options():
    base, opts = parse_spec("m.onnx?resize=64x96&mean=0.5&std=0.5,0.5,0.5&scale=1/255&pad=32&classes=c.json")
    assert base == "m.onnx"
    assert opts == {"resize": (64, 96), "mean": (0.5,), "std": (0.5, 0.5, 0.5), "scale": 1 / 255, "pad": 32,
                    "classes": "c.json"}
    with pytest.raises(ValueError, match="each option once"):
        parse_spec("m.onnx?pad=8&pad=16")
    with pytest.raises(ValueError, match="std as 1 or 3 comma-separated numbers > 0"):
        parse_spec("m.onnx?std=0,1,1")


def test_backend_failure_is_one_line_value_error():
    class OddFails(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.shape[-1] % 2:
                raise RuntimeError("sizes must be even\nsee the model card")
            return x[:, :2]

    seg = TorchSegmenter(OddFails(), 2)
    assert seg.predict_proba(IMAGES[:, :, :50]).shape == (3, 2, 37, 50)
    with pytest.raises(ValueError, match=r"failed on input of shape \[3, 37, 49, 3\].*RuntimeError: sizes must be even"
                       ) as err:
        seg.predict_proba(IMAGES[:, :, :49])
    assert "\n" not in str(err.value)
    assert TorchSegmenter(OddFails(), 2, policy=InputPolicy(pad=2)).predict_proba(IMAGES[:, :, :49]).shape[-1] == 49


def test_model_classes_for_any_segmenter():
    from blindspots.models import model_classes

    class Plain:
        num_classes = 3

    assert model_classes(Plain()).names == ("class_0", "class_1", "class_2")
    seg = CallableSegmenter(lambda b: np.zeros((len(b), 2) + b.shape[1:3], np.float32) + 0.5, 2)
    assert model_classes(seg) is seg.classes


def test_overrides_beat_spec_and_skip_kinds_they_do_not_fit(tmp_path):
    from blindspots.models import load_model

    folder = tmp_path / "pre"
    folder.mkdir()
    np.save(folder / "a.png.npy", np.full((2, 4, 4), 0.5, np.float32))
    seg = load_model(str(folder), batch_size=8, device="cpu")  # not a precomputed option: ignored
    assert seg.num_classes == 2
    with pytest.raises(ValueError, match="option 'batch_size' does not apply to a precomputed folder"):
        load_model(f"{folder}?batch_size=8")
    assert load_model(f"{folder}?num_classes=3", num_classes=2).num_classes == 2


def test_warns_when_logits_look_like_probabilities(caplog):
    seg = CallableSegmenter(lambda b: np.full((len(b), 1) + b.shape[1:3], 0.9, np.float32), 2, output="logits")
    with caplog.at_level("WARNING", logger="blindspots.models.adapters.base"):
        seg.predict_proba(IMAGES)
        seg.predict_proba(IMAGES)
    assert sum("output=probabilities" in r.getMessage() for r in caplog.records) == 1


def test_absolute_spec(tmp_path):
    from blindspots.models.spec_syntax import absolute_spec, parse_spec

    spec = absolute_spec("models/m.onnx?pad=32&classes=c.txt&mean=0.5,0.5,0.5", tmp_path)
    base, opts = parse_spec(spec)
    assert base == str(tmp_path / "models" / "m.onnx") and opts["classes"] == str(tmp_path / "c.txt")
    assert opts["pad"] == 32 and opts["mean"] == (0.5, 0.5, 0.5)
    assert absolute_spec("pkg.mod:build?weights=w.pt", tmp_path) == f"pkg.mod:build?weights={tmp_path / 'w.pt'}"
    assert absolute_spec("/abs/m.pt", tmp_path) == "/abs/m.pt"


def test_boolean_masks_as_labels():
    seg = CallableSegmenter(lambda b: b[:, ::2, ::2, 0] > 127, 2, output="labels")
    p = seg.predict_proba(IMAGES)
    assert p.shape == (3, 2, 37, 50)
    np.testing.assert_array_equal(p[:, 1, ::2, ::2], IMAGES[:, ::2, ::2, 0] > 127)


def test_channels_bgr_feeds_the_flipped_image():
    """A model scoring its input's channel 0: rgb sees R, bgr sees B, the same as the flipped image."""
    img = np.zeros((1, 9, 13, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 200, 90, 30  # distinct R and B

    def fn(b: np.ndarray) -> np.ndarray:
        return np.stack([b[..., 0], 255 - b[..., 0]], 1).astype(np.float32) / 64  # logits

    def seg(channels: str) -> CallableSegmenter:
        return CallableSegmenter(fn, 2, output="logits", policy=InputPolicy(channels=channels, pad=8))

    rgb, bgr = seg("rgb").predict_proba(img), seg("bgr").predict_proba(img)
    assert not np.allclose(rgb, bgr)
    np.testing.assert_allclose(bgr, seg("rgb").predict_proba(img[..., ::-1]))
    assert InputPolicy().native and not InputPolicy(channels="bgr").native
    with pytest.raises(ValueError, match=r"^channels: expected one of rgb\|bgr, got 'grb'$"):
        InputPolicy(channels="grb")
    assert parse_spec("m.onnx?channels=BGR")[1] == {"channels": "bgr"}
    with pytest.raises(ValueError, match=r"^spec: expected channels to be one of rgb\|bgr, got 'rbg' in 'm.onnx"):
        parse_spec("m.onnx?channels=rbg")
