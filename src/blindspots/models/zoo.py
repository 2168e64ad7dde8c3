"""Reference segmentation architectures of different design, for demos, tests and benchmarks.

MAD ("Efficiently Troubleshooting Image Segmentation Models with Human-in-the-Loop";
docs/architecture.md#papers) compares a target model with
competitors *of different design*; the zoo gives small CPU-trainable members of the families the
paper uses (DeepLabV3, pyramid pooling, encoder-decoders) plus light custom nets. All are built
offline with random initialisation (`weights=None`, `weights_backbone=None`,
`encoder_weights=None`); nothing is downloaded.

Every zoo module maps float [N, 3, H, W] (ImageNet-normalised, see `TorchPreprocess`) to logits
float [N, C, H, W] for any H, W: inputs are padded to the network's stride and the output is
cropped back, and torchvision's {"out": ...} dicts are unwrapped.

Checkpoints (`save_checkpoint`) are torch files holding arch, num_classes, classes (dict),
state_dict and meta (training data, epochs, seed, metrics, ...), written atomically.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import nn

from blindspots.data.classes import Classes
from blindspots.extras import require
from blindspots.models.adapters import TorchSegmenter
from blindspots.models.checkpoints import load_checkpoint_dict, save_checkpoint_dict

# Lazy imports: segmentation_models_pytorch, torchvision (optional: only the call that uses them needs them).

CHECKPOINT_FORMAT = "blindspots.segmenter/1"


class PadCrop(nn.Module):
    """Pads the input (reflect) to a multiple of `multiple`, runs `net`, crops the logits back.

    Also unwraps torchvision's dict output ("out"), so the module always returns a tensor
    float [N, C, H, W].
    """

    def __init__(self, net: nn.Module, multiple: int) -> None:
        super().__init__()
        self.net = net
        self.multiple = int(multiple)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        ph, pw = (-h) % self.multiple, (-w) % self.multiple
        if ph or pw:
            mode = "reflect" if (ph < h and pw < w) else "replicate"
            x = F.pad(x, (0, pw, 0, ph), mode=mode)
        y = self.net(x)
        if isinstance(y, dict):
            y = y["out"]
        if y.shape[-2:] != x.shape[-2:]:
            y = F.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)
        return y[..., :h, :w]


def _conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class TinyUNet(nn.Module):
    """A light U-Net (Ronneberger et al., 2015): 3 down / 3 up stages, `width` channels at full res.

    dropout > 0: channel dropout (Dropout2d) after the blocks below full resolution (the three lower encoder
    stages and the two lower decoder stages), active in training, so that MC-dropout BALD samples the dropout
    the network was trained with (Gal, Islam & Ghahramani 2017, arXiv:1703.02910: p = 0.25 after the
    convolutions); the full-resolution blocks and the classifier stay without it, as in the "central" dropout
    of Bayesian SegNet (Kendall, Badrinarayanan & Cipolla 2015, arXiv:1511.02680). 0: no dropout layer."""

    def __init__(self, num_classes: int, width: int = 16, dropout: float = 0.0) -> None:
        super().__init__()
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout: expected a probability in [0, 1), got {dropout!r}")
        w = width
        self.enc = nn.ModuleList([
            nn.Sequential(_conv_bn(3, w), _conv_bn(w, w)),
            nn.Sequential(_conv_bn(w, 2 * w), _conv_bn(2 * w, 2 * w)),
            nn.Sequential(_conv_bn(2 * w, 4 * w), _conv_bn(4 * w, 4 * w)),
            nn.Sequential(_conv_bn(4 * w, 8 * w), _conv_bn(8 * w, 8 * w)),
        ])
        self.up = nn.ModuleList([nn.ConvTranspose2d(c, c // 2, 2, stride=2) for c in (8 * w, 4 * w, 2 * w)])
        self.dec = nn.ModuleList([
            nn.Sequential(_conv_bn(8 * w, 4 * w), _conv_bn(4 * w, 4 * w)),
            nn.Sequential(_conv_bn(4 * w, 2 * w), _conv_bn(2 * w, 2 * w)),
            nn.Sequential(_conv_bn(2 * w, w), _conv_bn(w, w)),
        ])
        self.head = nn.Conv2d(w, num_classes, 1)
        # one per encoder then decoder stage; identity at full resolution (and everywhere when dropout is 0)
        self.drop = nn.ModuleList([nn.Dropout2d(dropout) if dropout > 0 and i not in (0, 6) else nn.Identity()
                                   for i in range(7)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = []
        for i, stage in enumerate(self.enc):
            x = self.drop[i](stage(x if i == 0 else F.max_pool2d(x, 2)))
            skips.append(x)
        x = skips.pop()
        for j, (up, dec) in enumerate(zip(self.up, self.dec)):
            x = self.drop[4 + j](dec(torch.cat([up(x), skips.pop()], dim=1)))
        return self.head(x)


class SmallFCN(nn.Module):
    """A plain fully convolutional net (Long et al., 2015) with dilated context, stride 4, no skips."""

    def __init__(self, num_classes: int, width: int = 32) -> None:
        super().__init__()
        w = width
        self.body = nn.Sequential(
            _conv_bn(3, w), nn.MaxPool2d(2), _conv_bn(w, 2 * w), nn.MaxPool2d(2), _conv_bn(2 * w, 2 * w),
            nn.Conv2d(2 * w, 2 * w, 3, padding=2, dilation=2, bias=False), nn.BatchNorm2d(2 * w), nn.ReLU(inplace=True),
            nn.Conv2d(2 * w, 2 * w, 3, padding=4, dilation=4, bias=False), nn.BatchNorm2d(2 * w), nn.ReLU(inplace=True),
            nn.Conv2d(2 * w, num_classes, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.body(x), size=x.shape[-2:], mode="bilinear", align_corners=False)


def _lraspp(c: int) -> nn.Module:
    seg = require("torchvision.models.segmentation", "the zoo architecture lraspp_mnv3")
    return PadCrop(seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=c), 32)


def _deeplabv3_mnv3(c: int) -> nn.Module:
    seg = require("torchvision.models.segmentation", "the zoo architecture deeplabv3_mnv3")
    return PadCrop(seg.deeplabv3_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=c,
                                                    aux_loss=False), 32)


def _smp(kind: str, encoder: str, multiple: int, **kw: Any) -> Callable[[int], nn.Module]:
    def build(c: int) -> nn.Module:
        smp = require("segmentation_models_pytorch", f"the zoo architecture {kind}/{encoder}")
        return PadCrop(getattr(smp, kind)(encoder_name=encoder, encoder_weights=None, classes=c, **kw), multiple)
    return build


ZOO: dict[str, Callable[[int], nn.Module]] = {
    "lraspp_mnv3": _lraspp,                                   # torchvision LR-ASPP, MobileNetV3-Large
    "deeplabv3_mnv3": _deeplabv3_mnv3,                        # torchvision DeepLabV3 (ASPP), MobileNetV3-Large
    "pspnet_r18": _smp("PSPNet", "resnet18", 8),              # smp PSPNet (pyramid pooling), ResNet-18
    "fpn_r18": _smp("FPN", "resnet18", 32),                   # smp FPN (feature pyramid), ResNet-18
    "unet_mnv2": _smp("Unet", "mobilenet_v2", 32),            # smp U-Net, MobileNetV2 encoder
    "tiny_unet": lambda c: PadCrop(TinyUNet(c), 8),           # light custom U-Net (fast on CPU)
    "tiny_unet_dropout": lambda c: PadCrop(TinyUNet(c, dropout=0.25), 8),  # the same, trained with dropout
    "small_fcn": lambda c: PadCrop(SmallFCN(c), 4),           # plain dilated FCN, no skips
}
"""Architecture name -> builder(num_classes) -> nn.Module (logits [N, C, H, W])."""

ZOO_DESCRIPTIONS: dict[str, str] = {
    "lraspp_mnv3": "torchvision LR-ASPP with a MobileNetV3-Large backbone",
    "deeplabv3_mnv3": "torchvision DeepLabV3 (ASPP) with a MobileNetV3-Large backbone",
    "pspnet_r18": "segmentation-models-pytorch PSPNet with a ResNet-18 encoder",
    "fpn_r18": "segmentation-models-pytorch FPN with a ResNet-18 encoder",
    "unet_mnv2": "segmentation-models-pytorch U-Net with a MobileNetV2 encoder",
    "tiny_unet": "light custom U-Net (16 channels at full resolution)",
    "tiny_unet_dropout": "the light U-Net with channel dropout 0.25 below full resolution (for MC-dropout BALD)",
    "small_fcn": "plain dilated fully convolutional net, stride 4, no skip connections",
}


def build_model(name: str, num_classes: int) -> nn.Module:
    """A freshly initialised zoo model (no pretrained weights). Returns an nn.Module mapping
    float [N, 3, H, W] to logits float [N, num_classes, H, W]."""
    if name not in ZOO:
        raise ValueError(f"name: expected one of {sorted(ZOO)}, got {name!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes: expected an int >= 2, got {num_classes!r}")
    return ZOO[name](num_classes)


def count_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def save_checkpoint(
    path: str | Path,
    module: nn.Module,
    *,
    arch: str | None,
    classes: Classes | None,
    meta: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> Path:
    """Write a checkpoint atomically (tmp file + os.replace).

    Holds arch (a ZOO name), num_classes, classes (Classes.to_dict()), state_dict, meta
    (JSON-like: training data, epochs, seed, metrics) and `extra` (e.g. optimizer state for resume).
    arch=None and classes=None write a training-state file for a module outside the zoo
    (resumable by `training.segmentation`, not loadable by `load_checkpoint`).
    """
    if arch is not None and arch not in ZOO:
        raise ValueError(f"arch: expected one of {sorted(ZOO)} (or None), got {arch!r}")
    if classes is not None and not isinstance(classes, Classes):
        raise ValueError(f"classes: expected a blindspots Classes (or None), got {type(classes).__name__}")
    payload = {
        "arch": arch,
        "num_classes": None if classes is None else classes.num_classes,
        "classes": None if classes is None else classes.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in module.state_dict().items()},
        "meta": dict(meta or {}),
    }
    if extra:
        payload.update(extra)
    return save_checkpoint_dict(path, payload, format=CHECKPOINT_FORMAT)


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The raw checkpoint dict (weights_only load: no code runs from the file)."""
    return load_checkpoint_dict(path, format=CHECKPOINT_FORMAT)


def load_checkpoint(path: str | Path) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild the model of a checkpoint. Returns (module in eval mode, info) where info holds
    arch, num_classes, classes (a Classes), meta."""
    ckpt = read_checkpoint(path)
    if ckpt.get("arch") is None or ckpt.get("classes") is None:
        raise ValueError(f"path: expected a zoo checkpoint with arch and classes, got a training-state file "
                         f"{str(path)!r} (save it with save_checkpoint(..., arch=..., classes=...))")
    module = build_model(ckpt["arch"], int(ckpt["num_classes"]))
    module.load_state_dict(ckpt["state_dict"])
    module.eval()
    info = {"arch": ckpt["arch"], "num_classes": int(ckpt["num_classes"]),
            "classes": Classes.from_dict(ckpt["classes"]), "meta": ckpt.get("meta", {})}
    return module, info


def load_segmenter(path: str | Path, *, batch_size: int = 16, device: str = "cpu", **options: Any
                   ) -> TorchSegmenter:
    """A checkpoint as a Segmenter: predict_proba(uint8 [N, H, W, 3]) -> float32 [N, C, H, W].

    The adapter's `.classes` are the checkpoint's (unless options give `classes`) and `.info`
    holds kind "zoo", path, arch, num_classes, classes and meta. options: more TorchSegmenter
    keywords (policy, preprocess, output, output_key).
    """
    module, info = load_checkpoint(path)
    options.setdefault("classes", info["classes"])
    options.setdefault("output", "logits")
    return TorchSegmenter(module, info["num_classes"], batch_size=batch_size, device=device,
                          info={"kind": "zoo", "path": str(path), **info}, **options)
