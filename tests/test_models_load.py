"""load_model: every spec kind (HF folder, ONNX with a one-channel head, TorchScript, module:factory +
state_dict, callable, precomputed), options, probe_model and one-line errors."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from blindspots.models import (
    CallableSegmenter,
    HFSegmenter,
    OnnxSegmenter,
    PrecomputedSegmenter,
    TorchScriptSegmenter,
    TorchSegmenter,
    load_model,
    predict_proba_each,
    probe_model,
    spec_kind,
)
from blindspots.models.adapters.inputs import TorchPreprocess
from blindspots.models.adapters.onnx import export_onnx
from test_app_own_models import cli as own_cli, make_spec, pool  # noqa: F401 - pool: a fixture, reused
from hf_helpers import tiny_segformer

torch.set_num_threads(1)
RNG = np.random.default_rng(0)
IMAGES = RNG.integers(0, 256, (2, 40, 56, 3), dtype=np.uint8)  # not a multiple of 32
OTHER = RNG.integers(0, 256, (1, 33, 47, 3), dtype=np.uint8)


def _one_line(err: pytest.ExceptionInfo, spec: str) -> None:
    msg = str(err.value)
    assert "\n" not in msg and spec in msg and "Traceback" not in msg, msg


# --- Hugging Face SegFormer --------------------------------------------------------------------

@pytest.fixture(scope="module")
def segformer(tmp_path_factory) -> tuple[Path, torch.nn.Module]:
    model = tiny_segformer()
    folder = tmp_path_factory.mktemp("hf") / "segformer"
    model.save_pretrained(folder)
    return folder, model


def _hf_reference(model: torch.nn.Module, images: np.ndarray, size: tuple[int, int] | None = None) -> np.ndarray:
    x = TorchPreprocess()(images)
    if size is not None:
        x = TorchPreprocess()(F.interpolate(torch.from_numpy(images).permute(0, 3, 1, 2).float(), size=size,
                                            mode="bilinear", antialias=True).round().clamp(0, 255).byte()
                              .permute(0, 2, 3, 1).numpy())
    with torch.no_grad():
        logits = model(pixel_values=x).logits
    logits = F.interpolate(logits, size=images.shape[1:3], mode="bilinear", align_corners=False)
    return torch.softmax(logits, 1).numpy()


def test_hf_folder_native(segformer):
    folder, model = segformer
    seg = load_model(str(folder))
    assert isinstance(seg, HFSegmenter) and seg.info["kind"] == "hf" and seg.info["spec"] == str(folder)
    assert seg.classes.names == ("sky", "road", "car") and seg.num_classes == 3
    p = seg.predict_proba(IMAGES)  # SegFormer logits come at 1/4 resolution
    assert p.shape == (2, 3, 40, 56) and p.dtype == np.float32
    np.testing.assert_allclose(p, _hf_reference(model, IMAGES), atol=1e-5)
    probe_model(seg, IMAGES[0], "hf")
    assert spec_kind(str(folder)) == "hf"


def test_hf_folder_uses_preprocessor_config(segformer, tmp_path):
    folder, model = segformer
    copy = tmp_path / "with_processor"
    model.save_pretrained(copy)
    (copy / "preprocessor_config.json").write_text(json.dumps({
        "do_resize": True, "size": {"height": 32, "width": 32}, "do_normalize": True, "do_rescale": True,
        "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225], "rescale_factor": 1 / 255}))
    seg = load_model(str(copy))
    assert seg.policy.resize == (32, 32)
    p = seg.predict_proba(IMAGES)
    assert p.shape == (2, 3, 40, 56)
    np.testing.assert_allclose(p, _hf_reference(model, IMAGES, (32, 32)), atol=1e-4)
    native = load_model(f"{copy}?resize=none")  # the spec beats the processor config
    np.testing.assert_allclose(native.predict_proba(IMAGES), _hf_reference(model, IMAGES), atol=1e-5)
    # mixed sizes in one call: each image comes back at its own size
    outs = predict_proba_each(seg, [IMAGES[0], OTHER[0], IMAGES[1]])
    assert [o.shape for o in outs] == [(3, 40, 56), (3, 33, 47), (3, 40, 56)]
    np.testing.assert_allclose(outs[2], p[1], atol=1e-6)


@pytest.mark.parametrize("arch", ["upernet", "dpt"])
def test_hf_other_architectures(arch, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    if arch == "upernet":
        backbone = transformers.ConvNextConfig(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                                               out_features=["stage1", "stage2", "stage3", "stage4"])
        model = transformers.UperNetForSemanticSegmentation(transformers.UperNetConfig(
            backbone_config=backbone, hidden_size=16, auxiliary_channels=8, use_auxiliary_head=False, num_labels=4))
        spec = str(tmp_path / arch)
    else:  # a ViT backbone: one input size only, so the spec resizes
        model = transformers.DPTForSemanticSegmentation(transformers.DPTConfig(
            hidden_size=16, num_hidden_layers=4, num_attention_heads=2, intermediate_size=32, image_size=32,
            patch_size=8, backbone_out_indices=[0, 1, 2, 3], neck_hidden_sizes=[8, 8, 16, 16], fusion_hidden_size=16,
            num_labels=4, use_auxiliary_head=False))
        spec = f"{tmp_path / arch}?resize=32x32"
    model.eval().save_pretrained(tmp_path / arch)
    seg = load_model(spec)
    assert isinstance(seg, HFSegmenter) and seg.num_classes == 4
    assert seg.predict_proba(IMAGES).shape == (2, 4, 40, 56)
    probe_model(seg, OTHER[0], arch)


# --- ONNX with a one-channel head that needs multiples of 32 -------------------------------------------

class Needs32(torch.nn.Module):
    """float [N, 3, H, W] -> one channel [N, 1, H, W]; H and W must be multiples of 32 (a stride-32 branch)."""

    def __init__(self, sigmoid: bool) -> None:
        super().__init__()
        torch.manual_seed(3)
        self.conv = torch.nn.Conv2d(3, 1, 3, padding=1)
        self.sigmoid = sigmoid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context = F.interpolate(F.avg_pool2d(x, 32), scale_factor=32.0, mode="nearest")
        logit = 4 * self.conv(x + context)  # shapes only agree for multiples of 32
        return torch.sigmoid(logit) if self.sigmoid else logit


@pytest.fixture(scope="module")
def onnx_pair(tmp_path_factory) -> tuple[Path, Path, np.ndarray]:
    root = tmp_path_factory.mktemp("onnx")
    prob = export_onnx(Needs32(True).eval(), root / "prob.onnx", height=64, width=64)
    logit = export_onnx(Needs32(False).eval(), root / "logit.onnx", height=64, width=64)
    padded = np.pad(IMAGES, ((0, 0), (0, 24), (0, 8), (0, 0)), mode="edge")  # 64 x 64
    with torch.no_grad():
        ref = torch.sigmoid(Needs32(False).eval()(TorchPreprocess()(padded)))[..., :40, :56].numpy()
    return prob, logit, ref


def test_onnx_one_channel_probability_and_logit_variants(onnx_pair):
    prob, logit, ref = onnx_pair
    seg_p = load_model(f"{prob}?output=probabilities&pad=32")
    seg_l = load_model(f"{logit}?output=logits&pad=32")
    assert isinstance(seg_p, OnnxSegmenter) and seg_p.num_classes == 2 and seg_l.num_classes == 2
    pp, pl = seg_p.predict_proba(IMAGES), seg_l.predict_proba(IMAGES)
    assert pp.shape == pl.shape == (2, 2, 40, 56)
    np.testing.assert_allclose(pp[:, 1], ref[:, 0], atol=1e-5)
    np.testing.assert_allclose(pl, pp, atol=1e-5)
    np.testing.assert_allclose(pl.sum(1), 1, atol=1e-6)
    assert pl[:, 1].std() > 0.01 and (pl[:, 1] < 0.99).any()  # not "1.0 everywhere"
    for seg in (seg_p, seg_l):
        probe_model(seg, OTHER[0], "binary")
    mixed = predict_proba_each(seg_l, [IMAGES[0], OTHER[0], IMAGES[1]])  # mixed sizes in one call
    assert [m.shape for m in mixed] == [(2, 40, 56), (2, 33, 47), (2, 40, 56)]
    np.testing.assert_allclose(mixed[2], pl[1], atol=1e-6)


def test_onnx_one_channel_errors(onnx_pair):
    prob, logit, _ = onnx_pair
    with pytest.raises(ValueError, match=r"one-channel probabilities.*output=logits") as err:
        probe_model(load_model(f"{logit}?output=probabilities&pad=32"), IMAGES[0], "txt")
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match=r"model 'native' .*failed on a 40x56 image.*pad=N") as err:
        probe_model(load_model(f"{prob}?output=probabilities"), IMAGES[0], "native")
    assert "\n" not in str(err.value)


# --- TorchScript, module:factory + state_dict -------------------------------------------------------

class TinyNet(torch.nn.Module):
    def __init__(self, c: int = 3) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, c, 3, padding=1, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def test_torchscript_with_options(tmp_path):
    pytest.importorskip("blindspots.data.classfile", reason="the classes-file reader comes with the data helper")
    torch.manual_seed(0)
    module = TinyNet().eval()
    path = tmp_path / "m.pt"
    torch.jit.save(torch.jit.script(module), str(path))
    (tmp_path / "classes.txt").write_text("# my classes\nsky 70,130,180\nroad #804080\ncar 0,0,142\n"
                                          "ignore_index: 255\n")
    seg = load_model(f"{path}?classes={tmp_path / 'classes.txt'}&max_side=32&batch_size=1")
    assert isinstance(seg, TorchScriptSegmenter) and seg.classes.names == ("sky", "road", "car")
    assert seg.classes.palette[1].tolist() == [128, 64, 128]
    p = seg.predict_proba(IMAGES)
    ref = TorchSegmenter(module, 3, policy=seg.policy).predict_proba(IMAGES)
    assert p.shape == (2, 3, 40, 56)
    np.testing.assert_allclose(p, ref, atol=1e-6)
    # the same images shrunk to a longer side of 32 first
    small = TorchSegmenter(module, 3).predict_proba(seg.policy.prepare(IMAGES))
    assert small.shape[-2:] == (23, 32)


FACTORY_SRC = '''
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 3, 3, padding=1, stride=2)

    def forward(self, x):
        return {"out": self.conv(x)}

def build():
    return Net()

def build_two(x, y):
    return Net()
'''


def test_module_factory_with_state_dict_from_cwd(tmp_path, monkeypatch):
    (tmp_path / "my_seg_factory_mod.py").write_text(FACTORY_SRC)
    monkeypatch.chdir(tmp_path)  # no PYTHONPATH: the spec imports from the current folder
    torch.manual_seed(5)
    trained = TinyNet().eval()
    torch.save({"state_dict": trained.state_dict(), "epoch": 3}, tmp_path / "w.pt")
    seg = load_model("my_seg_factory_mod:build?weights=w.pt&pad=8")
    assert isinstance(seg, TorchSegmenter) and seg.info["kind"] == "factory" and seg.num_classes == 3
    assert isinstance(seg.module, torch.nn.Module)  # trainable: the loop can fine-tune it
    ref = TorchSegmenter(trained, 3, policy=seg.policy).predict_proba(IMAGES)
    np.testing.assert_allclose(seg.predict_proba(IMAGES), ref, atol=1e-6)
    assert spec_kind("my_seg_factory_mod:build") == "factory"
    assert isinstance(load_model("my_seg_factory_mod:Net"), TorchSegmenter)  # a Module class is a factory too
    (tmp_path / "junk.pt").write_bytes(b"\x00random bytes")
    with pytest.raises(ValueError, match="weights: expected a state_dict file") as err:
        load_model("my_seg_factory_mod:build?weights=junk.pt")
    _one_line(err, "junk.pt")
    torch.save(TinyNet(5).state_dict(), tmp_path / "other.pt")
    with pytest.raises(ValueError, match=r"weights: expected a state_dict that fits") as err:
        load_model("my_seg_factory_mod:build?weights=other.pt")
    _one_line(err, "other.pt")
    with pytest.raises(ValueError, match="does not fit|expected an importable|failed on|TypeError|Error") as err:
        load_model("my_seg_factory_mod:build_two?weights=w.pt")
    _one_line(err, "build_two")


# --- callables at any resolution, precomputed folders ----------------------------------------------------

CALLABLE_SRC = '''
import numpy as np

def quarter_logits(images):
    n, h, w = images.shape[:3]
    small = images[:, ::4, ::4].astype(np.float32) / 64.0  # [n, ceil(h/4), ceil(w/4), 3]
    return small.transpose(0, 3, 1, 2)

def quarter_labels(images):
    return (images[:, ::4, ::4, 0] > 127).astype(np.int64)
'''


def test_callable_low_resolution_output(tmp_path, monkeypatch):
    (tmp_path / "my_lowres_callables.py").write_text(CALLABLE_SRC)
    monkeypatch.chdir(tmp_path)
    seg = load_model("my_lowres_callables:quarter_logits?output=logits")
    assert isinstance(seg, CallableSegmenter) and seg.num_classes == 3 and spec_kind(seg.info["spec"]) == "callable"
    p = seg.predict_proba(IMAGES)
    small = torch.from_numpy(IMAGES[:, ::4, ::4].astype(np.float32).transpose(0, 3, 1, 2) / 64.0)
    ref = torch.softmax(F.interpolate(small, size=(40, 56), mode="bilinear", align_corners=False), 1).numpy()
    np.testing.assert_allclose(p, ref, atol=1e-6)
    labels = load_model("my_lowres_callables:quarter_labels?output=labels&num_classes=2")
    q = labels.predict_proba(IMAGES)
    assert q.shape == (2, 2, 40, 56)
    np.testing.assert_array_equal(q[:, 1, ::4, ::4], IMAGES[:, ::4, ::4, 0] > 127)
    with pytest.raises(ValueError, match="option 'mean' does not apply to a callable") as err:
        load_model("my_lowres_callables:quarter_logits?mean=0.5")
    _one_line(err, "quarter_logits")


def test_precomputed_one_channel_with_classes(tmp_path):
    pytest.importorskip("blindspots.data.classfile", reason="the classes-file reader comes with the data helper")
    folder = tmp_path / "pre"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for i in ("a.png", "b.png"):
        np.save(folder / f"{i}.npy", rng.random((1, 8, 12)).astype(np.float32))
    (tmp_path / "c.json").write_text(json.dumps({"names": ["background", "person"], "ignore_index": None,
                                                 "palette": [[0, 0, 0], [255, 0, 0]]}))
    seg = load_model(f"{folder}?classes={tmp_path / 'c.json'}")
    assert isinstance(seg, PrecomputedSegmenter) and seg.classes.names == ("background", "person")
    assert seg.classes.ignore_index is None and seg.num_classes == 2
    p = seg.predict_proba(None, ids=["a.png", "b.png"])
    np.testing.assert_allclose(p[:, 1], np.stack([np.load(folder / f"{i}.png.npy")[0] for i in ("a", "b")]))
    probe_model(seg, np.zeros((8, 12, 3), np.uint8), "pre", image_id="a.png")
    with pytest.raises(ValueError, match="option 'pad' does not apply to a precomputed"):
        load_model(f"{folder}?pad=32")


# --- errors: one line naming the spec ----------------------------------------------------------------------

def test_load_errors_are_one_line(tmp_path):
    junk = tmp_path / "junk.pt"
    junk.write_bytes(np.random.default_rng(0).bytes(256))
    (tmp_path / "m.xyz").write_text("?")
    cases = [
        (str(tmp_path / "missing.pt"), "no such file"),
        (str(junk), "neither"),
        (str(tmp_path / "m.xyz"), "'.xyz'"),
        ("no_such_pkg_xyz.sub:fn", "importable 'module:function'"),
        (f"{junk}?resize=big", "resize as HxW"),
        (f"{junk}?pad=0", "pad to be a positive integer"),
        (f"{junk}?mean=1,2", "mean as 1 or 3"),
        (f"{junk}?scale=1/0", "scale as a positive number"),
        (f"{junk}?output=raw", "output to be one of"),
    ]
    for spec, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            load_model(spec)
        _one_line(err, spec)
    state = tmp_path / "state.pt"
    torch.save(TinyNet().state_dict(), state)  # a plain state_dict: say how to load it
    with pytest.raises(ValueError, match="factory\\?weights=") as err:
        load_model(str(state))
    _one_line(err, str(state))


def test_probe_model_names_the_model():
    def broken(images):
        raise RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB")

    seg = CallableSegmenter(broken, 3)
    with pytest.raises(ValueError, match=r"model 'comp1'.*failed on a 40x56 image.*out of memory") as err:
        probe_model(seg, IMAGES[0], "comp1")
    assert "\n" not in str(err.value)

    class Wrong:
        num_classes = 3

        def predict_proba(self, images):
            return np.ones((1, 3, 5, 5), np.float32) / 3

    with pytest.raises(ValueError, match=r"model 'w': expected float32 probabilities \[1, 3, 40, 56\]"):
        probe_model(Wrong(), IMAGES[0], "w")


# --- channels=bgr for every kind, keyword arguments of module:function / module:factory ------------------

class Channel0(torch.nn.Module):
    """float [N, 3, H, W] -> its channel 0 as a one-channel logit [N, 1, H, W]."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1] * 3


KWARGS_SRC = '''
import numpy as np
import torch

def channel0(images):
    return images[:, None, :, :, 0].astype(np.float32) / 64  # [n, 1, h, w] logits of channel 0

def scaled(images, path, size="1"):
    assert isinstance(path, str) and isinstance(size, str)  # spec values stay strings
    return images[:, None, :, :, 0].astype(np.float32) * float(size) / 255

class Channel0(torch.nn.Module):
    def __init__(self, gain=3.0):
        super().__init__()
        self.gain = float(gain)

    def forward(self, x):
        return x[:, :1] * self.gain

def make(path, gain="3"):
    assert path == "x.tflite"
    return Channel0(gain)
'''


@pytest.fixture()
def kwargs_module(tmp_path, monkeypatch) -> Path:
    (tmp_path / "my_kwargs_models.py").write_text(KWARGS_SRC)
    monkeypatch.chdir(tmp_path)
    import sys
    sys.modules.pop("my_kwargs_models", None)
    return tmp_path


@pytest.mark.parametrize("kind", ["callable", "factory", "torchscript", "onnx"])
def test_channels_bgr_for_every_kind(kind, kwargs_module):
    img = np.zeros((1, 40, 56, 3), np.uint8)
    img[..., 0], img[..., 2] = 220, 20  # distinct R and B
    root = kwargs_module
    if kind == "torchscript":
        spec = str(root / "c0.ts")
        torch.jit.save(torch.jit.script(Channel0()), spec)
    elif kind == "onnx":
        spec = str(export_onnx(Channel0().eval(), root / "c0.onnx", height=64, width=64)) + "?pad=32"
    else:
        spec = {"callable": "my_kwargs_models:channel0", "factory": "my_kwargs_models:Channel0"}[kind]
    sep = "&" if "?" in spec else "?"
    rgb = load_model(f"{spec}{sep}output=logits")
    bgr = load_model(f"{spec}{sep}output=logits&channels=bgr")
    assert bgr.policy.channels == "bgr" and bgr.policy.pad == rgb.policy.pad  # the kind's own sizing kept
    p_rgb, p_bgr = rgb.predict_proba(img), bgr.predict_proba(img)
    assert not np.allclose(p_rgb, p_bgr)
    np.testing.assert_allclose(p_bgr, rgb.predict_proba(img[..., ::-1]), atol=1e-6)


def test_module_specs_take_keyword_arguments(kwargs_module):
    seg = load_model("my_kwargs_models:scaled?path=x.tflite&size=2&output=logits")
    assert isinstance(seg, CallableSegmenter) and seg.info["kind"] == "callable"
    np.testing.assert_allclose(seg.predict_proba(IMAGES)[:, 1],
                               torch.sigmoid(torch.from_numpy(IMAGES[..., 0] * 2.0 / 255)).numpy(), atol=1e-6)
    fac = load_model("my_kwargs_models:make?path=x.tflite&gain=0.5&output=logits")
    assert isinstance(fac, TorchSegmenter) and fac.info["kind"] == "factory" and fac.module.gain == 0.5
    assert spec_kind("my_kwargs_models:make?path=x.tflite") == "factory"
    with pytest.raises(ValueError, match=r"keyword arguments of my_kwargs_models:scaled \('path', 'size'\), "
                                         r"got \['colour'\]") as err:
        load_model("my_kwargs_models:scaled?path=x&colour=red")
    _one_line(err, "colour=red")
    with pytest.raises(ValueError, match=r"keyword arguments of my_kwargs_models:make .*got \['nope'\]"):
        load_model("my_kwargs_models:make?path=x.tflite&nope=1")
    with pytest.raises(ValueError, match="option 'mean' does not apply to a callable"):  # grammar options stay
        load_model("my_kwargs_models:scaled?path=x&mean=0.5")
    (kwargs_module / "probs").mkdir()
    with pytest.raises(ValueError, match=r"expected options among .* got 'path'"):  # other kinds: no kwargs
        load_model("probs?path=x")


def test_init_short_options(tmp_path, pool):
    """`blindspots init -t ... -c ...` as `blindspots scan` (the own-models pool and specs, reused)."""
    code, out = own_cli("init", "--help")
    assert code == 0 and re.search(r"--target\s+-t\s", out) and re.search(r"--competitor\s+-c\s", out), out
    target, comp = make_spec("onnx", tmp_path, pool)
    code, out = own_cli("init", tmp_path / "proj", "--pool", pool, "-t", f"target={target}?channels=bgr",
                        "-c", f"comp={comp}", "--raters", 1)
    assert code == 0, out
    from blindspots.loop.project import Project

    assert [m.name for m in Project.open(tmp_path / "proj").registry.models()] == ["target", "comp"]


@pytest.mark.parametrize("spec, module", [
    ("pkg.mod:fn", True), ("pkg.mod:fn?c=3", True), ("runs/a-b:c.pt", False), ("C:\\models\\m.onnx", False),
    ("C:/models/m.onnx", False), ("model.onnx?output=logits", False), ("my_pkg.seg:make.model", True),
])
def test_one_rule_says_whether_a_spec_is_a_path(tmp_path: Path, spec: str, module: bool) -> None:
    """The project store (`is_path_spec`) and the loader (`parse_spec`) follow one rule."""
    from blindspots.loop.models import is_path_spec
    from blindspots.models.spec_syntax import call_kwargs, is_module_spec, parse_spec

    assert is_module_spec(spec.partition("?")[0]) is module
    assert is_path_spec(spec) is (not module)
    if "?" in spec:  # options the grammar does not know are keyword arguments of a module spec only
        assert bool(call_kwargs(parse_spec(spec)[1])) is module


def test_an_existing_file_with_a_module_like_name_is_a_path(tmp_path: Path) -> None:
    from blindspots.loop.models import is_path_spec

    (tmp_path / "pkg.mod:fn").write_bytes(b"")
    assert is_path_spec("pkg.mod:fn", tmp_path) and not is_path_spec("pkg.mod:fn")
