"""Common checks over every public entry point, as scikit-learn's `check_estimator` does for estimators.

One battery of bad inputs (wrong type, dtype, ndim, empty, NaN/inf, out-of-range settings, bad seeds,
unfitted use) is applied by parametrisation to every registered sampler, surprise estimator, label-issue
function, metric and model adapter. A new entry point is checked by adding it to the lists below; a
sampler added to the registry without a case here fails `test_every_registered_sampler_has_a_case`.
Each bad input must give a ValueError whose message names the argument; an empty result for a reason the
user did not ask for must come with a warning naming the reason.
"""
from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import pandas as pd
import pytest
import torch

from blindspots import metrics
from blindspots.labels import find_label_issues, get_label_quality_scores
from blindspots.mine import make_sampler, sampler_names
from blindspots.models import CallableSegmenter, TorchSegmenter, load_model
from blindspots.surprise import DSA, LSA, MDSA

# --- samplers ----------------------------------------------------------------------------------


def score_table(n: int = 30, seed: int = 0) -> pd.DataFrame:
    """A score table with the columns of a scan of target t and competitor g (plus surprise columns)."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "id": [f"img_{i:03d}.png" for i in range(n)],
        "status": "ok",
        "entropy__t": rng.random(n).astype(np.float32),
        "maxprob__t": rng.uniform(0.4, 1.0, n).astype(np.float32),
        "frac__t__0": rng.uniform(0.2, 0.8, n).astype(np.float32),
        "frac__g__0": rng.uniform(0.2, 0.8, n).astype(np.float32),
        "dpa__t__g": rng.random(n),
        "dmiou__t__g": rng.random(n),
        "surprise_mdsa__t": rng.random(n).astype(np.float32),
        "entropy__g": rng.random(n).astype(np.float32),
        "al_margin__t": rng.random(n).astype(np.float32),  # acquisition columns (mine.model_columns.acquisition)
        "al_bald__t": rng.random(n).astype(np.float32),
        "al_qbcvote__t": rng.random(n).astype(np.float32),  # committee columns (mine.samplers.qbc)
        "al_qbckl__t": rng.random(n).astype(np.float32),
        "al_feat__t__0": rng.normal(size=n).astype(np.float32),
        "al_feat__t__1": rng.normal(size=n).astype(np.float32),
        **{f"al_badge__t__{j}": rng.normal(size=n).astype(np.float32) for j in range(4)},  # BADGE gradients
        "content_hash": [f"h{i:03d}" for i in range(n)],
    })


def scenarios_for(table: pd.DataFrame) -> Any:
    """Real scenarios (DP-GMM over two feature columns) found from 8 of the table's images."""
    from blindspots.scenarios.segmentation import find_scenarios

    feats = table.set_index("id")[["entropy__t", "maxprob__t"]].astype(np.float64)
    worst = feats["entropy__t"].sort_values().index[-8:]
    return find_scenarios(feats, list(worst), random_state=0)


#: strategy -> settings builder (from the table); every registered strategy needs a case here
SAMPLER_CASES: dict[str, Callable[[pd.DataFrame], dict[str, Any]]] = {
    "mad": lambda t: {"target": "t", "ranges": [[0.0, 1.0]], "n3": 10},
    "madplus": lambda t: {"target": "t", "ranges": [[0.0, 1.0]], "n3": 10},
    "margin": lambda t: {"target": "t"},
    "bald": lambda t: {"target": "t"},
    "powerbald": lambda t: {"target": "t"},
    "coreset": lambda t: {"target": "t"},
    "badge": lambda t: {"target": "t"},
    "entropy": lambda t: {"target": "t"},
    "qbc": lambda t: {"target": "t"},
    "portfolio": lambda t: {"target": "t", "ranges": [[0.0, 1.0]], "n3": 10},
    "surprise": lambda t: {"kind": "mdsa"},
    "random": lambda t: {},
    "scenario": lambda t: {"scenarios": scenarios_for(t)},
}

BAD_SEEDS = ["x", -1, 2.5, True, None]
BAD_NS = [-1, 2.5, "3", True]


def test_every_registered_sampler_has_a_case():
    assert set(sampler_names()) <= set(SAMPLER_CASES), sorted(set(sampler_names()) - set(SAMPLER_CASES))


def _sampler(name: str, table: pd.DataFrame):
    return make_sampler(name, **SAMPLER_CASES[name](table))


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
@pytest.mark.parametrize("seed", BAD_SEEDS, ids=repr)
def test_sampler_refuses_bad_seed(name, seed):
    t = score_table()
    with pytest.raises(ValueError, match=r"^seed: expected an integer >= 0, got"):
        _sampler(name, t).select(t, 5, seed=seed)


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
@pytest.mark.parametrize("n", BAD_NS, ids=repr)
def test_sampler_refuses_bad_n(name, n):
    t = score_table()
    with pytest.raises(ValueError, match=r"^n: expected None or an integer >= 0"):
        _sampler(name, t).select(t, n, seed=0)


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
@pytest.mark.parametrize("table", [None, [1, 2], np.zeros((3, 3))], ids=["None", "list", "array"])
def test_sampler_refuses_a_table_that_is_not_a_dataframe(name, table):
    with pytest.raises(ValueError, match=r"^table: expected a pandas.DataFrame"):
        _sampler(name, score_table()).select(table, 5, seed=0)


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
def test_sampler_is_deterministic_per_seed(name):
    t = score_table()
    s = _sampler(name, t)
    a, b = s.select(t, 8, seed=3), s.select(t, 8, seed=3)
    pd.testing.assert_frame_equal(a, b)
    assert len(a) == 8 and a["id"].is_unique


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
def test_sampler_warns_when_every_row_is_an_error(name):
    t = score_table().assign(status="error")
    with pytest.warns(UserWarning, match="every one of its 30 rows is an error row"):
        picks = _sampler(name, t).select(t, 5, seed=0)
    assert len(picks) == 0


@pytest.mark.parametrize("name", sorted(SAMPLER_CASES))
def test_sampler_asked_for_nothing_is_silent(name):
    t = score_table()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(_sampler(name, t).select(t, 0, seed=0)) == 0


#: samplers that rank by one score per row and give it as `score_samples(table)` (scikit-learn's name)
SCORING_SAMPLERS = ("entropy", "margin", "surprise")


def test_the_row_scoring_samplers_are_the_ones_with_score_samples():
    t = score_table()
    assert {n for n in SAMPLER_CASES if hasattr(_sampler(n, t), "score_samples")} == set(SCORING_SAMPLERS)


@pytest.mark.parametrize("name", SCORING_SAMPLERS)
def test_score_samples_is_what_select_ranks_by(name):
    t = score_table()
    t.loc[[3, 7], "status"] = "error"  # scored, never picked
    s = _sampler(name, t)
    scores = s.score_samples(t)
    assert scores.dtype == np.float64 and scores.shape == (len(t),) and np.isfinite(scores).all()
    picks = s.select(t, None, seed=0)
    usable = np.flatnonzero(t["status"].eq("ok").to_numpy())
    expected = usable[np.argsort(-scores[usable], kind="stable")]  # highest first, ties in table order
    assert picks["id"].tolist() == t["id"].to_numpy()[expected].tolist()
    np.testing.assert_array_equal(picks["score"].to_numpy(), scores[expected])


@pytest.mark.parametrize("name", SCORING_SAMPLERS)
def test_score_samples_refuses_a_table_that_is_not_a_dataframe(name):
    with pytest.raises(ValueError, match=r"^table: expected a pandas.DataFrame"):
        _sampler(name, score_table()).score_samples(np.zeros((3, 3)))


def test_score_samples_follows_the_ranking_direction():
    t = score_table()
    maxprob = t["maxprob__t"].to_numpy(np.float64)
    np.testing.assert_array_equal(make_sampler("entropy", target="t", column_prefix="maxprob").score_samples(t),
                                  -maxprob)  # least confident first
    np.testing.assert_array_equal(make_sampler("margin", target="t").score_samples(t),
                                  1.0 - t["al_margin__t"].to_numpy(np.float64))
    sa = t["surprise_mdsa__t"].to_numpy(np.float64)
    np.testing.assert_array_equal(make_sampler("surprise", order="low").score_samples(t), -sa)


def test_mad_with_nan_class_size_ranges_warns():
    t = score_table()
    with pytest.warns(UserWarning, match="no usable row had a finite score"):
        picks = make_sampler("mad", target="t", ranges=[[np.nan, np.nan]]).select(t, 5, seed=0)
    assert len(picks) == 0


# --- surprise estimators -----------------------------------------------------------------------

ESTIMATORS = [MDSA, LSA, DSA]
GOOD_TRACES = np.random.default_rng(0).normal(size=(40, 4))
GOOD_LABELS = np.repeat([0, 1], 20)
BAD_TRACES = {
    "strings": np.array([["a", "b"], ["c", "d"]]),
    "zero features": np.zeros((4, 0)),
    "1-D": np.zeros(8),
    "3-D": np.zeros((2, 2, 2)),
    "empty": np.zeros((0, 4)),
    "NaN": np.where(np.eye(40, 4) > 0, np.nan, GOOD_TRACES),
    "inf": np.where(np.eye(40, 4) > 0, np.inf, GOOD_TRACES),
}


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("case", sorted(BAD_TRACES))
def test_estimator_fit_refuses_bad_traces(cls, case):
    x = BAD_TRACES[case]
    with pytest.raises(ValueError, match=r"^(traces|labels):"):
        cls().fit(x, np.zeros(len(x), dtype=int) if x.ndim else x)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("labels", [np.zeros(39, int), np.full(40, -1), np.array(["a"] * 40), np.full(40, 0.5)],
                         ids=["short", "negative", "strings", "fractional"])
def test_estimator_fit_refuses_bad_labels(cls, labels):
    with pytest.raises(ValueError, match=r"^labels:"):
        cls().fit(GOOD_TRACES, labels)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_estimator_score_before_fit_says_fit_first(cls):
    with pytest.raises(ValueError, match="fit"):
        cls().score(GOOD_TRACES, GOOD_LABELS)


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_estimator_score_refuses_other_width(cls):
    est = cls().fit(GOOD_TRACES, GOOD_LABELS)
    with pytest.raises(ValueError, match=r"^traces: expected 4 features per trace"):
        est.score(GOOD_TRACES[:, :3], GOOD_LABELS)


# --- label issues ------------------------------------------------------------------------------

LABEL_FUNCTIONS = [get_label_quality_scores, find_label_issues]


def _probs(n: int = 2, k: int = 3, size: int = 8) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    p = rng.random((n, k, size, size)).astype(np.float32)
    return rng.integers(0, k, (n, size, size)), p / p.sum(1, keepdims=True)


def _label_cases() -> dict[str, tuple[dict[str, Any], str]]:
    labels, probs = _probs()
    return {
        "one class": ({"labels": np.zeros((2, 8, 8), int), "pred_probs": np.ones((2, 1, 8, 8), np.float32)},
                      "pred_probs"),
        "negative ignore_index": ({"labels": labels, "pred_probs": probs, "ignore_index": -5}, "ignore_index"),
        "float labels": ({"labels": labels + 0.5, "pred_probs": probs}, "labels"),
        "labels 2-D": ({"labels": labels[0], "pred_probs": probs}, "labels"),
        "probs 3-D": ({"labels": labels, "pred_probs": probs[:, 0]}, "pred_probs"),
        "int probs": ({"labels": labels, "pred_probs": (probs > 0.5).astype(int)}, "pred_probs"),
        "shape mismatch": ({"labels": labels[:, :4], "pred_probs": probs}, "pred_probs"),
        "class beyond K": ({"labels": labels + 3, "pred_probs": probs}, "labels"),
        "string ignore_index": ({"labels": labels, "pred_probs": probs, "ignore_index": "255"}, "ignore_index"),
        "empty": ({"labels": labels[:0], "pred_probs": probs[:0]}, "labels|pred_probs"),
    }


@pytest.mark.parametrize("fn", LABEL_FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", sorted(_label_cases()))
def test_label_functions_refuse_bad_input(fn, case):
    kwargs, arg = _label_cases()[case]
    with pytest.raises(ValueError, match=rf"^({arg})"):
        fn(verbose=False, **kwargs)


# --- metrics -----------------------------------------------------------------------------------

CM_FUNCTIONS = [metrics.iou_per_class, metrics.mean_iou, metrics.pixel_accuracy]
BAD_CMS = {
    "fractional counts": np.array([[1.5, 0.0], [0.0, 2.2]]),
    "NaN": np.array([[np.nan, 0.0], [0.0, 2.0]]),
    "negative": np.array([[-1, 0], [0, 2]]),
    "not square": np.zeros((2, 3), int),
    "empty": np.zeros((0, 0), int),
    "strings": np.array([["a", "b"], ["c", "d"]]),
}


@pytest.mark.parametrize("fn", CM_FUNCTIONS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("case", sorted(BAD_CMS))
def test_metrics_refuse_bad_confusion_matrices(fn, case):
    with pytest.raises(ValueError, match=r"^cm: expected"):
        fn(BAD_CMS[case])


@pytest.mark.parametrize("num_classes", [0, -1, 2.5, "3", None])
def test_confusion_matrix_refuses_bad_num_classes(num_classes):
    with pytest.raises(ValueError, match="num_classes"):
        metrics.confusion_matrix(np.zeros((4, 4), int), np.zeros((4, 4), int), num_classes)


def test_confusion_matrix_refuses_float_maps():
    with pytest.raises(ValueError, match=r"^(pred|target)"):
        metrics.confusion_matrix(np.zeros((4, 4)), np.zeros((4, 4), int), 2)


# --- model adapters and the loader -------------------------------------------------------------

@pytest.mark.parametrize("build", [lambda: TorchSegmenter(None, num_classes=2), lambda: TorchSegmenter(3, num_classes=2)],
                         ids=["None", "int"])
def test_torch_segmenter_refuses_a_module_that_is_not_callable(build):
    with pytest.raises(ValueError, match=r"^module: expected a torch.nn.Module"):
        build()


def test_callable_segmenter_refuses_a_non_callable():
    with pytest.raises(ValueError, match=r"^fn: expected a callable"):
        CallableSegmenter("not a function", num_classes=2)


def _adapters() -> dict[str, Any]:
    conv = torch.nn.Conv2d(3, 2, 1)

    def uniform(batch: np.ndarray) -> np.ndarray:
        return np.full((batch.shape[0], 2, batch.shape[1], batch.shape[2]), 0.5, np.float32)

    return {"torch": TorchSegmenter(conv, num_classes=2), "callable": CallableSegmenter(uniform, num_classes=2)}


BAD_IMAGES = {
    "0x0 image": np.zeros((1, 0, 0, 3), np.uint8),
    "0-wide image": np.zeros((1, 4, 0, 3), np.uint8),
    "no images": np.zeros((0, 4, 4, 3), np.uint8),
    "float images": np.zeros((1, 4, 4, 3), np.float32),
    "one image without batch axis": np.zeros((4, 4, 3), np.uint8),
    "5 channels": np.zeros((1, 4, 4, 5), np.uint8),
    "empty list": [],
    "mixed sizes in one call": [np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)],
}


@pytest.mark.parametrize("adapter", sorted(_adapters()))
@pytest.mark.parametrize("case", sorted(BAD_IMAGES))
def test_adapters_refuse_bad_images_before_the_model_runs(adapter, case):
    with pytest.raises(ValueError, match=r"^images: expected"):
        _adapters()[adapter].predict_proba(BAD_IMAGES[case])


@pytest.mark.parametrize("spec", ["", "no/such/model.onnx", "model.xyz", 3, "a.onnx?output=bogus"],
                         ids=repr)
def test_load_model_refuses_bad_specs(spec, tmp_path):
    with pytest.raises(ValueError):
        load_model(spec)
