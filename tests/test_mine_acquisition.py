"""Columns the model-based samplers read (margin, MC-dropout BALD, pooled features): exact against a
direct computation, MC dropout really stochastic and seeded, no dropout refused, added to a real scan."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from blindspots.data import ImagePool
from blindspots.mine import mine_scan
from blindspots.mine.model_columns.acquisition import add_acquisition_columns
from blindspots.mine.model_columns.acquisition import AcquisitionColumns, pixel_entropy
from blindspots.models.adapters import TorchSegmenter
from blindspots.scan import read_score_table, scan_pool
from test_scan import C, make_models, make_pool

torch.set_num_threads(1)


def dropout_net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Dropout2d(0.5),
                               torch.nn.Conv2d(8, C, 1))


def plain_net(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, C, 1))


def images(n: int = 3, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 16, 20, 3), dtype=np.uint8)


def test_mc_dropout_is_stochastic_seeded_and_leaves_the_model_in_eval():
    seg = TorchSegmenter(dropout_net(), C)
    cols = AcquisitionColumns(seg, "t", kinds=("bald",), mc_passes=6, seed=1)
    p = cols.mc_probabilities(images())
    assert p.shape == (6, 3, C, 16, 20)
    assert float((p[0] - p[1]).abs().max()) > 1e-3  # dropout really on: the passes differ
    torch.testing.assert_close(cols.mc_probabilities(images()), p)  # same seed, same batch: same passes
    other = AcquisitionColumns(seg, "t", kinds=("bald",), mc_passes=6, seed=2).mc_probabilities(images())
    assert float((other - p).abs().max()) > 1e-3
    assert not any(m.training for m in seg.module.modules())
    det = torch.from_numpy(seg.predict_proba(images()))
    torch.testing.assert_close(torch.from_numpy(seg.predict_proba(images())), det)  # plain inference deterministic
    # BALD = H[mean] - mean H, per pixel, averaged over the image (Houlsby et al. 2011)
    pd_ = p.double()
    expect = (pixel_entropy(pd_.mean(0)) - torch.stack([pixel_entropy(x) for x in pd_]).mean(0)).flatten(1).mean(1)
    np.testing.assert_allclose(cols(images())["al_bald__t"], expect.numpy(), rtol=1e-5)
    assert (expect > 0).all()


def test_a_model_without_dropout_is_refused_unless_dropout_is_given():
    seg = TorchSegmenter(plain_net(), C)
    with pytest.raises(ValueError, match=r"dropout: expected a model with dropout layers.*pass dropout=p"):
        AcquisitionColumns(seg, "t", kinds=("bald",))
    with pytest.raises(ValueError, match=r"dropout: expected None or a probability in \(0, 1\), got 1.5"):
        AcquisitionColumns(seg, "t", kinds=("bald",), dropout=1.5)
    cols = AcquisitionColumns(seg, "t", kinds=("bald",), dropout=0.25, mc_passes=4)
    p = cols.mc_probabilities(images())
    assert float((p[0] - p[1]).abs().max()) > 1e-3
    assert seg.module[1].training is False  # BatchNorm stays in eval mode during the MC passes
    state = {k: v.clone() for k, v in seg.module.state_dict().items()}
    cols(images())
    assert all(torch.equal(state[k], v) for k, v in seg.module.state_dict().items())  # weights untouched


def test_the_zoo_target_trained_with_dropout_is_sampled_with_its_own_dropout():
    from blindspots.models.zoo import TinyUNet, build_model

    plain, drop = build_model("tiny_unet", C), build_model("tiny_unet_dropout", C)
    assert not [m for m in plain.modules() if isinstance(m, torch.nn.Dropout2d)]
    assert len([m for m in drop.modules() if isinstance(m, torch.nn.Dropout2d) and m.p == 0.25]) == 5
    assert plain.state_dict().keys() == drop.state_dict().keys()  # the same weights: dropout has none
    with pytest.raises(ValueError, match=r"dropout: expected a probability in \[0, 1\), got 1"):
        TinyUNet(C, dropout=1)
    x = torch.rand(2, 3, 16, 16)
    drop.train()
    with torch.no_grad():
        assert float((drop(x) - drop(x)).abs().max()) > 1e-4  # active in training
    drop.eval()
    seg = TorchSegmenter(drop, C)
    with pytest.raises(ValueError, match="dropout: expected a model with dropout layers"):
        AcquisitionColumns(TorchSegmenter(plain.eval(), C), "t", kinds=("bald",))
    cols = AcquisitionColumns(seg, "t", kinds=("bald",), mc_passes=4, seed=0)  # dropout=None: its own layers
    p = cols.mc_probabilities(images())
    assert float((p[0] - p[1]).abs().max()) > 1e-4 and not any(m.training for m in drop.modules())
    assert (cols(images())["al_bald__t"] > 0).all()


def test_margin_and_features_match_a_direct_computation():
    seg = TorchSegmenter(plain_net(3), C)
    out = AcquisitionColumns(seg, "t", kinds=("margin", "features"))(images(4))
    proba = np.sort(seg.predict_proba(images(4)), axis=1)
    np.testing.assert_allclose(out["al_margin__t"], (proba[:, -1] - proba[:, -2]).mean((1, 2)), rtol=1e-5)
    feats = seg.features(images(4))  # the classifier layer's input [4, 8, 16, 20]
    for j in range(8):
        np.testing.assert_allclose(out[f"al_feat__t__{j}"], feats[:, j].mean((1, 2)), rtol=1e-5, atol=1e-6)
    assert len([k for k in out if k.startswith("al_feat__")]) == 8


def test_margin_of_any_model_kind_needs_only_probabilities():
    from blindspots.models.adapters import CallableSegmenter

    def fn(x: np.ndarray) -> np.ndarray:
        p = np.zeros((len(x), 2, *x.shape[1:3]), np.float32)
        p[:, 0], p[:, 1] = 0.7, 0.3
        return p

    seg = CallableSegmenter(fn, 2, output="probabilities")
    np.testing.assert_allclose(AcquisitionColumns(seg, "t", kinds=("margin",))(images())["al_margin__t"], 0.4,
                               rtol=1e-6)
    with pytest.raises(ValueError, match=r"segmenter: expected a model wrapping a torch nn.Module"):
        AcquisitionColumns(seg, "t", kinds=("features",))


def test_columns_added_to_a_scan_feed_the_samplers(tmp_path: Path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=12, sizes=(24,)))
    models = make_models()
    out = scan_pool(pool, models, tmp_path / "scan", target="t", batch_size=4, shard_size=5, progress=False)
    seg = TorchSegmenter(dropout_net(), C, batch_size=4)
    cols = add_acquisition_columns(out, pool, seg, "t", mc_passes=3, batch_size=4, progress=False)
    assert "al_margin__t" in cols and "al_bald__t" in cols and "al_feat__t__7" in cols
    table = read_score_table(out)
    assert table.loc[table["status"] == "ok", "al_bald__t"].notna().all()
    again = add_acquisition_columns(out, pool, seg, "t", mc_passes=3, batch_size=4, progress=False)  # resumed
    assert again == cols
    with pytest.raises(ValueError, match=r"name: expected the settings that filled .*mc_passes.*\(3, 4\)"):
        add_acquisition_columns(out, pool, seg, "t", mc_passes=4, batch_size=4, progress=False)
    for strategy in ("margin", "bald", "powerbald", "coreset"):
        picks = mine_scan(out, strategy, 4)
        assert len(picks) == 4 and picks["reason"].str.len().gt(0).all()


def fcn_scan(tmp_path: Path, n: int = 8) -> tuple[ImagePool, Path, dict, Path]:
    """(pool, the target's small_fcn checkpoint, the scanned models, the scan folder) of n images."""
    from blindspots.data.classes import Classes
    from blindspots.models.zoo import build_model, load_segmenter, save_checkpoint

    pool = ImagePool(make_pool(tmp_path / "pool", n=n, sizes=(24,), bad=False))
    classes = Classes(names=tuple(f"c{k}" for k in range(C)))
    torch.manual_seed(0)
    ckpt = save_checkpoint(tmp_path / "t.pt", build_model("small_fcn", C), arch="small_fcn", classes=classes)
    models = {"t": load_segmenter(ckpt, batch_size=4), **{k: v for k, v in make_models().items() if k != "t"}}
    return pool, ckpt, models, scan_pool(pool, models, tmp_path / "scan", target="t", batch_size=4, progress=False)


def test_cli_mine_computes_the_columns_once_from_the_model_spec(tmp_path: Path):
    from typer.testing import CliRunner

    from blindspots.cli import app

    pool, ckpt, models, scan = fcn_scan(tmp_path)
    run = CliRunner().invoke
    res = run(app, ["mine", str(scan), "-s", "coreset", "-n", "3", "--out", str(tmp_path / "a"), "--no-gallery"])
    assert res.exit_code == 2 and "--model: strategy 'coreset' reads ['features'] columns of 't'" in res.output
    res = run(app, ["mine", str(scan), "-s", "bald", "-n", "3", "--model", str(ckpt), "--out", str(tmp_path / "b"),
                    "--no-gallery"])
    assert res.exit_code == 2 and "dropout: expected a model with dropout layers" in res.output, res.output
    res = run(app, ["mine", str(scan), "-s", "bald", "-n", "3", "--model", str(ckpt), "--dropout", "0.25",
                    "--mc-passes", "3", "--out", str(tmp_path / "b"), "--no-gallery"])
    assert res.exit_code == 0, res.output
    res = run(app, ["mine", str(scan), "-s", "powerbald", "-n", "3", "--out", str(tmp_path / "c"), "--no-gallery"])
    assert res.exit_code == 0, res.output  # BALD columns are in the scan now: no model needed
    res = run(app, ["mine", str(scan), "-s", "madplus", "-n", "4", "--n3", "2", "--out", str(tmp_path / "d"),
                    "--no-gallery"])
    assert res.exit_code == 0, res.output
    import pandas as pd

    picks = pd.read_csv(tmp_path / "d" / "picks.csv")
    assert len(picks) == 4 and set(picks["part"]) <= {"mad", "shared"}


@pytest.mark.parametrize("arch", ["tiny_unet", "small_fcn"])
def test_head_only_mc_passes_equal_full_passes(arch):
    """dropout=p on the classifier input: running only that layer T times gives the T full passes' numbers."""
    from blindspots.mine.model_columns import acquisition
    from blindspots.models.zoo import build_model

    torch.manual_seed(0)
    seg = TorchSegmenter(build_model(arch, C), C)
    cols = AcquisitionColumns(seg, "t", kinds=("bald",), dropout=0.3, mc_passes=4, seed=2)
    fast = cols.mc_probabilities(images())
    orig = AcquisitionColumns._head_only
    try:
        AcquisitionColumns._head_only = lambda *a, **k: None  # force the full passes
        full = cols.mc_probabilities(images())
    finally:
        AcquisitionColumns._head_only = orig
    assert acquisition._post_head is not None and fast.shape == full.shape == (4, 3, C, 16, 20)
    torch.testing.assert_close(fast, full, rtol=1e-4, atol=1e-5)
    assert float((fast[0] - fast[1]).abs().max()) > 1e-4


def test_mine_page_baselines_snippet_runs_as_written(tmp_path_factory):
    """docs/mine.md's second Python block (margin columns, then mine_scan) on the page's first block's scan."""
    from test_docs_snippets import python_blocks, scanned

    done = scanned.__wrapped__(tmp_path_factory)  # the first block, run as written on a 24-scene pool
    code = python_blocks("mine.md")[1]
    for doc, real in {'"photos"': repr(str(done["root"] / "scenes" / "images")),
                      '"models/my_model.onnx"': '"test_docs_snippets:tiny_target"',
                      '"runs/scan"': repr(str(done["scan"]))}.items():
        assert doc in code, f"docs/mine.md: expected {doc} in its second Python block"
        code = code.replace(doc, real)
    ns: dict = {}
    exec(code, ns)
    assert len(ns["picks"]) == 20 and ns["picks"]["reason"].str.contains("top two classes").all()
