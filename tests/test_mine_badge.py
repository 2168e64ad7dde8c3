"""BADGE: k-means++ seeding exact on small cases (largest-norm first, D^2 draws), the gradient embedding
against autograd on tiny 1x1-conv heads (as is, resized, cropped, binary), refusals, and the sampler
reached from a real scan and from the CLI."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from blindspots.mine import kmeans_pp_seeding, make_sampler, mine_scan
from blindspots.mine.model_columns.acquisition import AcquisitionColumns, add_acquisition_columns
from blindspots.mine.model_columns.badge_embedding import gradient_embedding
from blindspots.mine.reasons import describe
from blindspots.models.adapters import TorchSegmenter
from blindspots.scan import read_score_table
from test_scan import C

torch.set_num_threads(1)


def images(n: int = 3, seed: int = 0, size: tuple[int, int] = (16, 20)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *size, 3), dtype=np.uint8)


# ---- k-means++ seeding --------------------------------------------------------------------------------
def test_first_pick_is_the_largest_gradient_norm_whatever_the_seed():
    x = np.array([[1.0, 0.0], [0.0, -3.0], [2.0, 2.0], [0.5, 0.5]])  # norms 1, 3, 2.83, 0.71
    for seed in range(5):
        picks, dist = kmeans_pp_seeding(x, 2, np.random.default_rng(seed))
        assert picks[0] == 1 and dist[0] == pytest.approx(3.0)
        assert picks[1] != 1
    picks, _ = kmeans_pp_seeding(np.array([[2.0, 0.0], [0.0, 2.0]]), 1, np.random.default_rng(0))
    assert picks.tolist() == [0]  # ties: the first row, as numpy's argmax in the paper's code


def test_d2_draws_follow_squared_distance_and_skip_picks():
    # first pick (norm 5) at 5; the others are 1 and 2 away: drawn with probability 1/5 and 4/5
    x = np.array([[5.0], [4.0], [3.0], [5.0]])  # row 3 duplicates the first pick: distance 0, never drawn
    seconds = [int(kmeans_pp_seeding(x, 2, np.random.default_rng(s))[0][1]) for s in range(2000)]
    assert 3 not in seconds
    assert np.mean(np.array(seconds) == 2) == pytest.approx(0.8, abs=0.03)
    picks, dist = kmeans_pp_seeding(x, 4, np.random.default_rng(0))
    assert sorted(picks.tolist()) == [0, 1, 2, 3] and dist[-1] == 0.0  # only the duplicate left: drawn uniformly
    # whichever of 4 and 3 comes second, the last one is 1 from its nearest pick
    p, d = kmeans_pp_seeding(x[:3], 3, np.random.default_rng(1))
    assert p[0] == 0 and d[2] == pytest.approx(1.0)


def test_badge_sampler_reads_the_gradient_columns():
    rng = np.random.default_rng(0)
    g = rng.normal(size=(40, 6))
    g[7] *= 10  # the largest gradient: BADGE's first pick
    t = pd.DataFrame({"id": [f"i{k:02d}" for k in range(40)], "status": "ok",
                      **{f"al_badge__t__{j}": g[:, j].astype(np.float32) for j in range(6)}})
    t.loc[[3, 9], "status"] = "error"
    res = make_sampler("badge").select(t, 10, seed=4)
    assert res["id"].iloc[0] == "i07" and not {"i03", "i09"} & set(res["id"])
    first = json.loads(res["reason"].iloc[0])
    assert first["distance"] is None and first["grad_norm"] == pytest.approx(np.linalg.norm(g[7].astype(np.float32)),
                                                                             rel=1e-5)
    assert describe(res["reason"].iloc[0]).startswith("BADGE: first pick") and "k-means++" in describe(res["reason"][1])
    ok = np.flatnonzero(t["status"] == "ok")
    exp, d = kmeans_pp_seeding(g[ok].astype(np.float32), 10, np.random.default_rng(4))
    assert list(res["id"]) == list(t["id"].to_numpy()[ok[exp]]) and np.allclose(res["score"], d)
    other = make_sampler("badge").select(t, 10, seed=5)
    assert other["id"].iloc[0] == "i07" and list(other["id"]) != list(res["id"])  # the draws follow the seed
    assert len(make_sampler("badge").select(t, None)) == 38
    with pytest.raises(ValueError, match=r"target: expected a model with `al_badge__\{M\}` columns.*kinds=\['badge'\]"):
        make_sampler("badge", target="other").select(t, 3)


# ---- the gradient embedding against autograd ----------------------------------------------------------
class Net(torch.nn.Module):
    """conv 3x3 -> ReLU -> (stride-2 pooling) -> 1x1 head, output as is / resized / cropped."""

    def __init__(self, k: int = C, post: str = "as_is") -> None:
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Conv2d(5, k, 1)
        self.post = post

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.body(x)
        if self.post == "resized":
            return F.interpolate(self.head(F.avg_pool2d(h, 2)), size=x.shape[-2:], mode="bilinear",
                                 align_corners=False)
        if self.post == "cropped":
            return self.head(F.pad(h, (0, 3, 0, 2)))[..., : x.shape[-2], : x.shape[-1]]
        return self.head(h)


def autograd_embedding(seg: TorchSegmenter, imgs: np.ndarray) -> np.ndarray:
    """Per image: d/dW of the mean pixel cross-entropy with the model's own argmax, by autograd."""
    head = seg.module.head
    out = []
    for img in imgs:
        x = seg.preprocess(img[None], seg.device)
        y = seg.module(x)
        p = torch.sigmoid(y) if y.shape[1] == 1 else y.softmax(1)
        p = torch.cat([1 - p, p], 1) if y.shape[1] == 1 else p
        hard = p.detach().argmax(1)
        loss = F.nll_loss(torch.log(p), hard)  # mean over pixels
        (gw,) = torch.autograd.grad(loss, head.weight)
        out.append(gw.reshape(-1).numpy())
    return np.stack(out)


@pytest.mark.parametrize("post", ["as_is", "resized", "cropped"])
def test_embedding_equals_autograd_of_the_last_layer(post):
    torch.manual_seed(1)
    seg = TorchSegmenter(Net(post=post), C)
    imgs = images(3)
    g = gradient_embedding(seg, imgs)
    assert g.shape == (3, C * 5)
    np.testing.assert_allclose(g, autograd_embedding(seg, imgs), rtol=1e-4, atol=1e-6)
    cols = AcquisitionColumns(seg, "t", kinds=("badge",))(imgs)
    assert sorted(cols) == sorted(f"al_badge__t__{j}" for j in range(C * 5))
    np.testing.assert_allclose(np.stack([cols[f"al_badge__t__{j}"] for j in range(C * 5)], 1), g)


def test_embedding_is_the_mean_of_per_pixel_embeddings():
    """Output as is: g = mean_u (p_u - e_{argmax p_u}) (x) h_u, the formula of the paper per pixel."""
    torch.manual_seed(2)
    seg = TorchSegmenter(Net(), C)
    imgs = images(2, seed=3)
    feats = torch.from_numpy(seg.features(imgs)).double()  # [2, 5, H, W]
    p = torch.from_numpy(seg.predict_proba(imgs)).double()  # [2, C, H, W]
    r = p - F.one_hot(p.argmax(1), C).permute(0, 3, 1, 2)
    per_pixel = r[:, :, None] * feats[:, None]  # [2, C, 5, H, W]: small enough here to build
    np.testing.assert_allclose(gradient_embedding(seg, imgs), per_pixel.mean((3, 4)).reshape(2, -1), rtol=1e-4,
                               atol=1e-6)


def test_binary_one_channel_head():
    torch.manual_seed(3)
    seg = TorchSegmenter(Net(k=1), 2)
    imgs = images(2, seed=5)
    g = gradient_embedding(seg, imgs)
    assert g.shape == (2, 5)
    np.testing.assert_allclose(g, autograd_embedding(seg, imgs), rtol=1e-4, atol=1e-6)


def test_heads_badge_cannot_use_are_refused():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 5, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(5, C, 3, padding=1))
    with pytest.raises(ValueError, match=r"layer: BADGE expected the classifier layer '2@input' to be a 1x1 Conv2d"):
        AcquisitionColumns(TorchSegmenter(net, C), "t", kinds=("badge",))
    probs = TorchSegmenter(torch.nn.Sequential(Net(), torch.nn.Softmax(1)), C, output="probabilities")
    with pytest.raises(ValueError, match=r"segmenter: BADGE expected a model whose output is logits"):
        gradient_embedding(probs, images(1))


# ---- from a scan and from the CLI ---------------------------------------------------------------------
def test_badge_from_a_real_scan_and_the_cli(tmp_path: Path):
    from typer.testing import CliRunner

    from blindspots.cli import app
    from test_mine_acquisition import fcn_scan

    pool, ckpt, models, scan = fcn_scan(tmp_path, n=10)
    run = CliRunner().invoke
    res = run(app, ["mine", str(scan), "-s", "badge", "-n", "3", "--out", str(tmp_path / "a"), "--no-gallery"])
    assert res.exit_code == 2 and "--model: strategy 'badge' reads ['badge'] columns of 't'" in res.output
    res = run(app, ["mine", str(scan), "-s", "badge", "-n", "3", "--model", str(ckpt), "--out", str(tmp_path / "b"),
                    "--no-gallery"])
    assert res.exit_code == 0, res.output
    picks = pd.read_csv(tmp_path / "b" / "picks.csv")
    table = read_score_table(scan)
    g = table.filter(like="al_badge__t__").to_numpy(np.float64)
    head = [m for m in models["t"].module.modules() if isinstance(m, torch.nn.Conv2d) and m.out_channels == C][-1]
    assert g.shape == (10, C * head.in_channels) and np.isfinite(g).all()
    assert picks["id"].iloc[0] == table["id"].iloc[int(np.argmax(np.linalg.norm(g, axis=1)))]
    again = add_acquisition_columns(scan, pool, models["t"], "t", kinds=["badge"], batch_size=4, progress=False)
    assert len(again) == g.shape[1]  # resumed: the part is complete
    assert list(mine_scan(scan, "badge", 3)["id"]) == list(picks["id"])
