"""Region queries: superpixels ranked by target-competitor disagreement and target uncertainty; region
answers to partial masks; confident agreement; simulated answers."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.human.regions import partial_mask, simulated_region_answer
from blindspots.mine.regions import confident_labels, rank_regions, region_segments


def _quadrants() -> np.ndarray:
    seg = np.zeros((8, 8), dtype=np.int32)
    seg[:4, 4:], seg[4:, :4], seg[4:, 4:] = 1, 2, 3
    return seg


def _proba(labels: np.ndarray, sure: np.ndarray, c: int = 3) -> np.ndarray:
    """[C, H, W]: `sure` on each pixel's label, the rest spread evenly."""
    p = np.repeat(((1 - sure) / (c - 1))[None], c, 0).astype(np.float32)
    np.put_along_axis(p, labels[None].astype(np.int64), sure[None].astype(np.float32), 0)
    return p


def test_regions_rank_by_disagreement_and_uncertainty() -> None:
    seg = _quadrants()
    target = np.zeros((8, 8), dtype=np.int64)
    target[4:] = 1
    sure = np.full((8, 8), 0.95)
    sure[4:, :4] = 0.4  # region 2: torn
    comp = target.copy()
    comp[:4, 4:] = 2  # region 1: a competitor disagrees everywhere
    q = rank_regions(seg, _proba(target, sure), [comp], k=3)
    assert [r.region for r in q] == [1, 2, 0]  # 0 and 3 tie: the lower id first
    assert q[0].disagreement == 1.0 and q[0].guess == 0 and q[0].pixels == 16
    assert q[1].disagreement == 0.0 and q[1].uncertainty == pytest.approx(0.9) and q[1].guess == 1
    assert q[2].score < q[1].score
    assert len(rank_regions(seg, _proba(target, sure), [], k=10)) == 4  # at most the regions there are


def test_rank_regions_names_bad_arguments() -> None:
    seg, p = _quadrants(), _proba(np.zeros((8, 8), int), np.full((8, 8), 0.9))
    with pytest.raises(ValueError, match="target_proba"):
        rank_regions(seg, p[:, :4], [], k=1)
    with pytest.raises(ValueError, match=r"competitor_maps\[0\]"):
        rank_regions(seg, p, [np.zeros((4, 4))], k=1)
    with pytest.raises(ValueError, match="k: expected a positive integer"):
        rank_regions(seg, p, [], k=0)


def test_region_segments_cover_the_image_in_regions_of_about_the_asked_size() -> None:
    y, x = np.mgrid[:64, :96]
    img = np.stack([(x * 2) % 256, (y * 3) % 256, ((x // 16 + y // 16) % 2) * 200], -1).astype(np.uint8)
    seg = region_segments(img, pixels_per_region=256)
    assert seg.shape == (64, 96) and seg.min() == 0
    assert 12 <= seg.max() + 1 <= 48  # SLIC asks for 24
    noise = np.random.default_rng(0).integers(0, 255, (64, 96, 3), dtype=np.uint8)
    blocks = region_segments(noise, pixels_per_region=256)  # SLIC merges noise into one segment
    assert blocks.max() + 1 == 24 and np.bincount(blocks.ravel()).tolist() == [256] * 24


def test_partial_mask_answers_mixed_and_base() -> None:
    seg = _quadrants()
    m = partial_mask(seg, {0: 2, 3: None})
    assert (m[:4, :4] == 2).all() and (m[4:, 4:] == 255).all() and (m[:4, 4:] == 255).all()
    base = np.ones((8, 8), dtype=np.uint8)
    m = partial_mask(seg, {0: 2, 3: None}, base=base)
    assert (m[:4, 4:] == 1).all() and (m[4:, 4:] == 255).all() and (m[:4, :4] == 2).all()
    with pytest.raises(ValueError, match="answers: expected region ids in 0..3"):
        partial_mask(seg, {9: 1})
    with pytest.raises(ValueError, match=r"answers\[0\]"):
        partial_mask(seg, {0: 255})


def test_confident_labels_need_every_model_to_agree_and_be_sure() -> None:
    labels = np.zeros((2, 2), dtype=np.int64)
    t = _proba(labels, np.array([[0.95, 0.95], [0.5, 0.95]]))
    other = labels.copy()
    other[0, 1] = 2
    c = _proba(other, np.full((2, 2), 0.95))
    out = confident_labels([t, c], 0.9)
    assert out.tolist() == [[0, 255], [255, 0]]
    with pytest.raises(ValueError, match=r"probas\[1\]"):
        confident_labels([t, c[:, :1]])


def test_simulated_answer_is_the_majority_or_mixed() -> None:
    seg = _quadrants()
    truth = np.zeros((8, 8), dtype=np.uint8)
    truth[:4, 4:6] = 1  # region 1 is half 0, half 1
    assert simulated_region_answer(truth, seg, 0) == 0
    assert simulated_region_answer(truth, seg, 1) is None
    assert simulated_region_answer(truth, seg, 1, purity=0.5) in (0, 1)


def test_label_settings_round_trip_and_name_bad_values(tmp_path) -> None:  # noqa: ANN001
    from blindspots.config import FILLS, config_from_dict, dumps_config, load_config
    from blindspots.human.regions import FILL_MODES

    assert FILLS == FILL_MODES
    raw = {"pool": {"root": "pool"}, "target": {"name": "t", "path": "t.pt"},
           "competitors": [{"name": "c", "path": "c.pt"}],
           "labels": {"kind": "regions", "regions_per_image": 5, "fill": "confident", "agree": 0.8}}
    cfg = config_from_dict(raw, tmp_path)
    (tmp_path / "blindspots.toml").write_text(dumps_config(cfg))
    assert load_config(tmp_path).labels == cfg.labels
    for key, bad, msg in [("kind", "pixels", "labels.kind: expected one of"),
                          ("regions_per_image", 0, "labels.regions_per_image: expected an integer >= 1"),
                          ("fill", "zero", "labels.fill"), ("agree", 0, r"labels.agree: expected a probability")]:
        with pytest.raises(ValueError, match=msg):
            config_from_dict({**raw, "labels": {**raw["labels"], key: bad}}, tmp_path)
