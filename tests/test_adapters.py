"""Adapters: TorchScript, ONNX, callables, precomputed probabilities, load_model, output validation."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from blindspots.models.adapters import (
    CallableClassifier,
    CallableSegmenter,
    TorchClassifier,
    TorchScriptClassifier,
    TorchScriptSegmenter,
    TorchSegmenter,
    check_probabilities,
    one_hot_labels,
)
from blindspots.models.load import load_model
from blindspots.models.spec_syntax import is_torchscript_archive, parse_spec
from blindspots.models.adapters.onnx import OnnxClassifier, OnnxSegmenter, export_onnx
from blindspots.models.adapters.precomputed import PrecomputedSegmenter
from blindspots.models.protocol import predict_segmenter, reads_ids

torch.set_num_threads(1)
C = 4


class TinySeg(torch.nn.Module):
    """float [N, 3, H, W] -> logits [N, C, H/2, W/2] in a dict (like torchvision's "out")."""

    def __init__(self, num_classes: int = C, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1, stride=2), torch.nn.BatchNorm2d(8),
                                        torch.nn.ReLU(), torch.nn.Conv2d(8, num_classes, 1))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"out": self.body(x), "aux": self.body(x) * 0}


class TinyCls(torch.nn.Module):
    def __init__(self, num_classes: int = 3) -> None:
        super().__init__()
        torch.manual_seed(1)
        self.conv = torch.nn.Conv2d(3, 6, 3)
        self.fc = torch.nn.Linear(6, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.conv(x).mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def images() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (5, 32, 48, 3), dtype=np.uint8)


def _trained_bn(module: torch.nn.Module) -> torch.nn.Module:
    """Give BatchNorm non-trivial running stats so that eval mode matters."""
    module.train()
    with torch.no_grad():
        module(torch.randn(4, 3, 32, 32) * 3 + 1)
    return module.eval()


# --- torch module ------------------------------------------------------------------------------

def test_torch_segmenter_dict_output_upsampled_and_eval(images):
    module = _trained_bn(TinySeg())
    module.train()  # the adapter must switch to eval mode
    seg = TorchSegmenter(module, C, batch_size=2)
    p = seg.predict_proba(images)
    assert p.shape == (5, C, 32, 48) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(1), 1, atol=1e-5)
    assert not module.training
    # batching does not change results
    np.testing.assert_allclose(TorchSegmenter(module, C, batch_size=5).predict_proba(images), p, atol=1e-5)


# --- TorchScript -------------------------------------------------------------------------------

@pytest.mark.parametrize("suffix", [".ts", ".pt"])
def test_torchscript_matches_module(tmp_path, images, suffix):
    module = _trained_bn(TinySeg())
    path = tmp_path / f"m{suffix}"
    torch.jit.save(torch.jit.script(module), str(path))
    ref = TorchSegmenter(module, C).predict_proba(images)
    ts = TorchScriptSegmenter(path)  # num_classes probed
    assert ts.num_classes == C
    np.testing.assert_allclose(ts.predict_proba(images), ref, atol=1e-5)
    assert is_torchscript_archive(path)
    loaded = load_model(str(path))
    assert isinstance(loaded, TorchScriptSegmenter)
    np.testing.assert_allclose(loaded.predict_proba(images), ref, atol=1e-5)


def test_torchscript_classifier(tmp_path, images):
    module = TinyCls().eval()
    path = tmp_path / "c.ts"
    torch.jit.save(torch.jit.trace(module, torch.zeros(1, 3, 32, 32)), str(path))
    ref = TorchClassifier(module, 3).predict_proba(images)
    np.testing.assert_allclose(TorchScriptClassifier(path).predict_proba(images), ref, atol=1e-5)


def test_torchscript_rejects_non_torchscript(tmp_path):
    path = tmp_path / "x.ts"
    path.write_bytes(b"not a model")
    with pytest.raises(ValueError, match="TorchScript"):
        TorchScriptSegmenter(path, C)
    with pytest.raises(ValueError, match="existing TorchScript file"):
        TorchScriptSegmenter(tmp_path / "missing.ts", C)


# --- ONNX ----------------------------------------------------------------------------------------

def test_onnx_export_matches_torch(tmp_path, images):
    module = _trained_bn(TinySeg())
    path = export_onnx(module, tmp_path / "m.onnx", height=32, width=32)
    ref = TorchSegmenter(module, C).predict_proba(images)
    onnx_seg = OnnxSegmenter(path, batch_size=2)  # num_classes probed; dynamic N, H, W
    assert onnx_seg.num_classes == C
    np.testing.assert_allclose(onnx_seg.predict_proba(images), ref, atol=1e-4)
    loaded = load_model(f"{path}?batch_size=3")
    assert isinstance(loaded, OnnxSegmenter) and loaded.batch_size == 3
    np.testing.assert_allclose(loaded.predict_proba(images), ref, atol=1e-4)


def test_onnx_zoo_model(tmp_path, images):
    zoo = pytest.importorskip("blindspots.models.zoo", reason="the zoo is written by another helper")
    name = "lraspp_mnv3" if "lraspp_mnv3" in zoo.ZOO else sorted(zoo.ZOO)[0]
    module = zoo.build_model(name, 6).eval()
    imgs = np.random.default_rng(1).integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)
    ref = TorchSegmenter(module, 6).predict_proba(imgs)
    path = export_onnx(module, tmp_path / f"{name}.onnx", height=64, width=64)
    np.testing.assert_allclose(OnnxSegmenter(path, 6).predict_proba(imgs), ref, atol=1e-4)


def test_onnx_fixed_batch_is_padded(tmp_path, images):
    module = TinyCls().eval()
    path = tmp_path / "c.onnx"
    torch.onnx.export(module, (torch.zeros(2, 3, 32, 48),), str(path), input_names=["x"], output_names=["y"],
                      dynamo=False)  # fixed batch of 2, fixed size
    ref = TorchClassifier(module, 3).predict_proba(images)
    cls = OnnxClassifier(path, 3)
    assert cls.fixed_batch == 2
    np.testing.assert_allclose(cls.predict_proba(images), ref, atol=1e-4)


def test_onnx_bad_file(tmp_path):
    path = tmp_path / "bad.onnx"
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="valid ONNX"):
        OnnxSegmenter(path, C)


# --- callables ---------------------------------------------------------------------------------

def _red_labels(images: np.ndarray) -> np.ndarray:
    return images[..., 0].astype(np.int64) * C // 256


def test_callable_kinds_agree(images):
    labels = _red_labels(images)
    onehot = one_hot_labels(labels, C)
    assert onehot.shape == (5, C, 32, 48)
    np.testing.assert_array_equal(onehot.argmax(1), labels)
    seg_labels = CallableSegmenter(_red_labels, C, output="labels")
    np.testing.assert_array_equal(seg_labels.predict_proba(images), onehot)
    # logits (a torch tensor) -> softmaxed; argmax preserved
    seg_logits = CallableSegmenter(lambda b: torch.from_numpy(one_hot_labels(_red_labels(b), C) * 5), output="logits")
    assert seg_logits.num_classes == C  # probed
    p = seg_logits.predict_proba(images)
    np.testing.assert_allclose(p.sum(1), 1, atol=1e-5)
    np.testing.assert_array_equal(p.argmax(1), labels)
    # probabilities, called in chunks
    calls = []
    seg_prob = CallableSegmenter(lambda b: calls.append(len(b)) or one_hot_labels(_red_labels(b), C), C, batch_size=2)
    np.testing.assert_array_equal(seg_prob.predict_proba(images), onehot)
    assert calls == [2, 2, 1]


def test_callable_classifier(images):
    cls = CallableClassifier(lambda b: np.tile([[1.0, 2.0, 3.0]], (len(b), 1)), output="logits")
    p = cls.predict_proba(images)
    assert p.shape == (5, 3)
    np.testing.assert_allclose(p[0], np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), rtol=1e-5)


def test_callable_rejects_bad_settings():
    with pytest.raises(ValueError, match="fn: expected a callable"):
        CallableSegmenter(42, C)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_classes: expected an integer when output='labels'"):
        CallableSegmenter(_red_labels, output="labels")
    with pytest.raises(ValueError, match="output: expected one of"):
        CallableClassifier(lambda b: b, 3, output="labels")


# --- bad outputs -> clear ValueErrors --------------------------------------------------------------

def _bad(kind: str):
    def fn(b: np.ndarray) -> np.ndarray:
        n, h, w = b.shape[:3]
        p = np.full((n, C, h, w), 1.0 / C, dtype=np.float32)
        if kind == "rank":
            return p[:, :, 0]
        if kind == "shape":  # a missing image (outputs at another h, w are resized)
            return p[:-1]
        if kind == "classes":
            return p[:, :-1]
        if kind == "nan":
            p[0, 0, 0, 0] = np.nan
        if kind == "negative":
            p[0, 0, 0, 0] = -0.5
            p[0, 1, 0, 0] += 0.5
        if kind == "sum":
            p *= 1.5
        if kind == "int":
            return p.astype(np.int64)
        if kind == "labels_range":
            return np.full((n, h, w), C)
        return p
    return fn


@pytest.mark.parametrize("kind, match", [
    ("rank", r"expected 4 dimensions \[5, 4, 32, 48\], got 3"),
    ("shape", r"expected shape \[5, 4, 32, 48\], got \(4, 4, 32, 48\)"),
    ("classes", r"expected shape \[5, 4, 32, 48\], got \(5, 3, 32, 48\)"),
    ("nan", r"expected finite values, got 1 NaN/inf"),
    ("negative", r"expected probabilities in \[0, 1\].*output='logits'"),
    ("sum", r"expected probabilities summing to 1.*output='logits'"),
    ("int", r"expected floating-point values, got dtype int64"),
])
def test_bad_outputs_raise_clear_errors(images, kind, match):
    seg = CallableSegmenter(_bad(kind), C)
    with pytest.raises(ValueError, match=match) as err:
        seg.predict_proba(images)
    assert "callable output" in str(err.value)


def test_bad_outputs_logits_accepted_when_declared(images):
    p = CallableSegmenter(_bad("sum"), C, output="logits").predict_proba(images)
    np.testing.assert_allclose(p, 1.0 / C, atol=1e-6)
    with pytest.raises(ValueError, match="class ids in \\[0, 3\\]"):
        CallableSegmenter(_bad("labels_range"), C, output="labels").predict_proba(images)
    with pytest.raises(ValueError, match="expected finite"):  # NaN is refused even as logits
        CallableSegmenter(_bad("nan"), C, output="logits").predict_proba(images)


def test_torch_module_bad_output_and_inputs(images):
    seg = TorchSegmenter(torch.nn.Conv2d(3, C, 1), C, output="probabilities")
    with pytest.raises(ValueError, match="expected probabilities in \\[0, 1\\]"):
        seg.predict_proba(images)
    with pytest.raises(ValueError, match="expected shape \\[5, 3, 32, 48\\]"):
        TorchSegmenter(torch.nn.Conv2d(3, C, 1), 3).predict_proba(images)
    with pytest.raises(ValueError, match="images: expected dtype uint8, got float32"):
        seg.predict_proba(images.astype(np.float32))
    with pytest.raises(ValueError, match="output_key: expected one of"):
        TorchSegmenter(TinySeg(), C, output_key="nope").predict_proba(images)
    with pytest.raises(ValueError, match="output: expected 'probabilities' or 'logits', got 'raw'"):
        check_probabilities(np.ones((1, 1), np.float32), expected_shape=(1, 1), output="raw")  # type: ignore[arg-type]


# --- precomputed ---------------------------------------------------------------------------------

def _write_npy(folder: Path, ids: list[str], seed: int = 0, size: tuple[int, int] = (16, 24)) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i in ids:
        p = rng.random((C,) + size).astype(np.float32)
        p /= p.sum(0, keepdims=True)
        (folder / (i + ".npy")).parent.mkdir(parents=True, exist_ok=True)
        np.save(folder / (i + ".npy"), p)
        out[i] = p
    return out


def test_precomputed(tmp_path):
    ids = ["a.png", "sub/b.jpg"]
    arrays = _write_npy(tmp_path, ids)
    seg = PrecomputedSegmenter(tmp_path)
    assert seg.num_classes == C
    images = np.zeros((2, 16, 24, 3), np.uint8)
    p = seg.predict_proba(images, ids=ids)
    np.testing.assert_array_equal(p, np.stack([arrays[i] for i in ids]))
    assert reads_ids(seg) and not reads_ids(CallableSegmenter(lambda x: x, num_classes=2))
    np.testing.assert_array_equal(predict_segmenter(seg, images, ids), p)  # what every engine calls
    assert isinstance(load_model(str(tmp_path)), PrecomputedSegmenter)
    with pytest.raises(ValueError, match="ids: expected the images' ids.*keyed by image id"):
        seg.predict_proba(images[:1])
    with pytest.raises(ValueError, match="ids: expected the images' ids"):
        predict_segmenter(seg, images)
    with pytest.raises(ValueError, match="ids: expected one id per image"):
        predict_segmenter(seg, images, ids[:1])
    with pytest.raises(ValueError, match="relative ids inside the folder"):
        seg.predict_proba(None, ids=["../x.png"])
    with pytest.raises(ValueError, match="for id 'missing.png'"):
        seg.predict_proba(None, ids=["missing.png"])
    with pytest.raises(ValueError, match="the image size"):
        seg.predict_proba([images[0], np.zeros((8, 8, 3), np.uint8)], ids=ids)
    np.save(tmp_path / "bad.png.npy", np.ones((C, 16, 24), np.float32))
    with pytest.raises(ValueError, match="summing to 1"):
        seg.predict_proba(None, ids=["bad.png"])
    with pytest.raises(ValueError, match="folder: expected an existing folder"):
        PrecomputedSegmenter(tmp_path / "nope")


# --- load_model ---------------------------------------------------------------------------------

def test_load_model_specs(tmp_path, images, monkeypatch):
    mod = tmp_path / "user_models_for_test.py"
    mod.write_text("import numpy as np\n"
                   "def labels(b):\n    return b[..., 0].astype(np.int64) * 4 // 256\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seg = load_model("user_models_for_test:labels?output=labels&num_classes=4")
    assert isinstance(seg, CallableSegmenter) and seg.num_classes == 4
    np.testing.assert_array_equal(seg.predict_proba(images).argmax(1), _red_labels(images))
    assert parse_spec("m.onnx?output=logits&batch_size=8") == ("m.onnx", {"output": "logits", "batch_size": 8})
    with pytest.raises(ValueError, match="options among"):
        parse_spec("m.onnx?colour=red")
    with pytest.raises(ValueError, match="num_classes to be a positive integer"):
        parse_spec("m.onnx?num_classes=x")
    with pytest.raises(ValueError, match="importable 'module:function'"):
        load_model("no_such_module_xyz:fn")
    with pytest.raises(ValueError, match="no such file"):
        load_model(str(tmp_path / "missing.onnx"))
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ValueError, match="expected a folder of .npy"):
        load_model(str(tmp_path / "x.txt"))


def test_load_model_zoo_checkpoint(tmp_path, images):
    zoo = pytest.importorskip("blindspots.models.zoo", reason="the zoo is written by another helper")
    from blindspots.data.classes import Classes

    name = "small_fcn" if "small_fcn" in zoo.ZOO else sorted(zoo.ZOO)[0]
    module = zoo.build_model(name, 3).eval()
    classes = Classes(("a", "b", "c"))
    path = zoo.save_checkpoint(tmp_path / "m.pt", module, arch=name, classes=classes)
    assert not is_torchscript_archive(path)
    seg = load_model(str(path))
    assert isinstance(seg, TorchSegmenter) and seg.num_classes == 3 and seg.classes == classes
    np.testing.assert_allclose(seg.predict_proba(images), TorchSegmenter(module, 3).predict_proba(images), atol=1e-5)


def test_one_rgb_image_is_refused_with_the_fix_not_read_as_a_grey_batch(tmp_path: Path) -> None:
    """A user's first call is often `predict_proba(image)` with one [H, W, 3] image: it used to be
    read as H grey images 3 pixels wide, and the ONNX run then failed with a pad/resize hint."""
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 36, 3), dtype=np.uint8)
    module = TinySeg().eval()
    onnx_seg = OnnxSegmenter(export_onnx(module, tmp_path / "m.onnx", height=32, width=32, output_key="out"))
    for seg in (TorchSegmenter(module, num_classes=C), onnx_seg):
        with pytest.raises(ValueError, match=r"images: expected a batch \[N, H, W, 3\], got one image of shape "
                                             r"\(40, 36, 3\) \(pass images\[None\]"):
            seg.predict_proba(image)
        assert seg.predict_proba(image[None]).shape == (1, C, 40, 36)
    # a grey batch still goes through; a 3-channel ONNX graph says what is wrong with it
    with pytest.raises(ValueError, match="the graph takes 3 channels, the images have 1: grey images"):
        onnx_seg.predict_proba(image[None, :, :, 0])


def test_no_torch_warnings_for_read_only_images_or_torchscript_files(tmp_path: Path) -> None:
    """The CLI printed torch's "NumPy array is not writable" UserWarning (pool images decoded from
    buffers are read-only) and its `torch.jit.load` deprecation on every command with a TorchScript
    model. Run in a fresh process: torch warns about the array only once per process."""
    import subprocess
    import sys

    ts = tmp_path / "m.ts"
    torch.jit.script(TinySeg().eval()).save(str(ts))
    code = (
        "import warnings, numpy as np\n"
        "warnings.simplefilter('error')\n"
        "from blindspots.models.load import load_model\n"
        "from blindspots.models.adapters.inputs import resize_images\n"
        f"seg = load_model({str(ts)!r} + '?output_key=out')\n"
        "x = np.zeros((1, 20, 24, 3), np.uint8); x.setflags(write=False)\n"
        "assert seg.predict_proba(x).shape == (1, 4, 20, 24)\n"
        "assert resize_images(x, (10, 12)).shape == (1, 10, 12, 3)\n"
        "print('clean')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr[-2000:]


def test_onnx_feature_layer_error_lists_the_graphs_tensors(tmp_path: Path) -> None:
    """`surprise fit model.onnx` without --layer said only "e.g. '/backbone/layer3/Relu_output_0'",
    a name from another network: it now names tensors of the user's own graph."""
    seg = OnnxSegmenter(export_onnx(TinySeg().eval(), tmp_path / "m.onnx", height=32, width=32, output_key="out"))
    names = seg.tensor_names()
    assert names and not any(n.startswith("onnx::") for n in names)
    with pytest.raises(ValueError, match=r"layer: expected the name of an intermediate tensor of 'm.onnx' "
                                         r"\(--layer\), got None; its last ones: \[.*'/module/body/body.2/Relu_output_0'"):
        seg.default_feature_layer()
    with pytest.raises(ValueError, match="its last ones"):
        seg.features(np.zeros((1, 8, 8, 3), np.uint8))


def test_fixed_size_onnx_graph_with_a_size_option_says_the_size_it_takes(tmp_path: Path) -> None:
    """A 64x64-only graph given ?max_side=... failed on every image with a generic "add ?resize=HxW"."""
    path = tmp_path / "fixed.onnx"
    with torch.no_grad():
        torch.onnx.export(TinySeg().eval(), (torch.zeros(1, 3, 16, 16),), str(path), input_names=["x"],
                          output_names=["out"], opset_version=17, dynamo=False)
    image = np.zeros((1, 20, 30, 3), np.uint8)
    assert load_model(str(path)).predict_proba(image).shape == (1, C, 20, 30)  # resized to 16x16 and back
    with pytest.raises(ValueError, match=r"the graph takes 16x16 images only: leave out the size options, "
                                         r"which resize to it, or use \?resize=16x16"):
        load_model(f"{path}?max_side=24").predict_proba(image)


def test_a_quoted_spec_may_start_with_a_tilde(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Specs are quoted for their '&', so the shell leaves '~' alone: '~/m.ts' was "no such file"."""
    monkeypatch.setenv("HOME", str(tmp_path))
    torch.jit.script(TinySeg().eval()).save(str(tmp_path / "m.ts"))
    (tmp_path / "names.txt").write_text("a\nb\nc\nd\n")
    seg = load_model("~/m.ts?output_key=out&classes=~/names.txt")
    assert seg.classes.names == ("a", "b", "c", "d") and seg.num_classes == C
    assert parse_spec("~/m.ts?pad=32")[0] == str(tmp_path / "m.ts")
    assert parse_spec("mymodels:predict?path=~/x")[1]["path"] == "~/x"  # a function's keyword stays verbatim
