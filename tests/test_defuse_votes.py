"""Votes (majority with none-of-the-above, agreement), simulated annotators, scenario decisions."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blindspots.human.simulate_votes import SimulatedAnnotators
from blindspots.human.votes import (
    NONE, agreement_table, format_agreement_table, majority_vote, parse_label, read_votes_csv,
)
from blindspots.scenarios.review_set import ReviewSet, decide_scenarios, export_review, load_review

NAMES = tuple("0123")


def votes(rows):
    return pd.DataFrame(rows, columns=["item_id", "annotator", "label"])


def test_majority_ties_and_none():
    v = votes([("a", "x", 1), ("a", "y", 1), ("a", "z", 2),      # clear majority 1
               ("b", "x", 3), ("b", "y", 2),                      # tie -> lowest id 2
               ("c", "x", NONE), ("c", "y", NONE), ("c", "z", 0),  # none wins -> unlabelled
               ("d", "x", NONE), ("d", "y", 3)])                  # class beats none in a tie
    m = majority_vote(v, 4).set_index("item_id")
    assert m.loc["a", "label"] == 1 and m.loc["a", "agreement"] == pytest.approx(2 / 3)
    assert m.loc["b", "label"] == 2 and m.loc["b", "agreement"] == 0.5
    assert m.loc["c", "label"] == NONE and m.loc["c", "n_votes"] == 3
    assert m.loc["d", "label"] == 3


def test_vote_validation_and_csv(tmp_path):
    with pytest.raises(ValueError, match="votes: expected columns"):
        majority_vote(pd.DataFrame({"item": [1]}), 4)
    with pytest.raises(ValueError, match="votes: expected labels in -1..3"):
        majority_vote(votes([("a", "x", 7)]), 4)
    with pytest.raises(ValueError, match="one vote per"):
        majority_vote(votes([("a", "x", 1), ("a", "x", 2)]), 4)
    assert parse_label("None of the above", NAMES) == NONE and parse_label("2", NAMES) == 2
    with pytest.raises(ValueError, match="label: expected a class name"):
        parse_label("cat", NAMES)
    p = tmp_path / "v.csv"
    p.write_text("item_id,annotator,label\ns000-000,ann1,3\ns000-000,ann2,none\ns000-001,ann1,\n")
    v = read_votes_csv(p, NAMES)
    assert v["label"].tolist() == [3, NONE]
    p.write_text("item_id,annotator,label\ns000-000,ann1,seven\n")
    with pytest.raises(ValueError, match="row 2"):
        read_votes_csv(p, NAMES)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-1, 3), min_size=1, max_size=9))
def test_majority_invariants(labels):
    v = votes([("i", f"a{k}", lab) for k, lab in enumerate(labels)])
    m = majority_vote(v, 4).iloc[0]
    counts = {lab: labels.count(lab) for lab in set(labels)}
    assert counts[m["label"]] == max(counts.values())
    assert m["agreement"] == pytest.approx(max(counts.values()) / len(labels))
    assert 0 < m["agreement"] <= 1


def test_agreement_table():
    items = pd.DataFrame({"agreement": [1.0, 0.6, 0.8, 1.0], "in_failure_scenario": [True, True, False, False]})
    t = agreement_table(items)
    assert t.loc["Failure scenario", "mean"] == pytest.approx(80.0)
    assert t.loc["Non-failure scenario", "mean"] == pytest.approx(90.0)
    assert t.loc["Combined", "n"] == 4
    assert t.loc["Failure scenario", "se"] == pytest.approx(np.std([100, 60], ddof=1) / np.sqrt(2))
    assert "MNIST" in format_agreement_table(t, "MNIST")


class FixedOracle:
    num_classes = 4

    def __init__(self, proba):
        self.proba = np.asarray(proba, np.float32)

    def predict_proba(self, images):
        return self.proba[: len(images)]


def test_simulated_annotators():
    proba = np.array([[0.97, 0.01, 0.01, 0.01], [0.25, 0.25, 0.26, 0.24], [0.0, 0.0, 0.0, 1.0]])
    images = np.zeros((3, 4, 4, 1), np.uint8)
    exact = SimulatedAnnotators(FixedOracle(proba), n_annotators=5, temperature=0.01, error_rate=0.0, seed=0)
    v = exact.vote(images, ["a", "b", "c"])
    assert v["simulated"].all() and v["annotator"].str.startswith("simulated-").all()
    assert v.groupby("item_id")["label"].agg(lambda s: set(s)).to_dict() == {"a": {0}, "b": {2}, "c": {3}}
    unsure = SimulatedAnnotators(FixedOracle(proba), n_annotators=7, error_rate=0.0, none_threshold=0.5, seed=1)
    m = majority_vote(unsure.vote(images, ["a", "b", "c"]), 4).set_index("item_id")
    assert m.loc["b", "label"] == NONE and m.loc["c", "label"] == 3
    noisy = SimulatedAnnotators(FixedOracle(proba), n_annotators=9, error_rate=1.0, seed=2)
    assert len(set(noisy.vote(images, ["a", "b", "c"])["label"])) > 1
    a = SimulatedAnnotators(FixedOracle(proba), seed=4).vote(images, ["a", "b", "c"])
    b = SimulatedAnnotators(FixedOracle(proba), seed=4).vote(images, ["a", "b", "c"])
    pd.testing.assert_frame_equal(a, b)
    with pytest.raises(ValueError, match="item_ids"):
        exact.vote(images, ["a"])


def make_review() -> ReviewSet:
    items = pd.DataFrame({"item_id": [f"s{j:03d}-{i:03d}" for j in range(3) for i in range(4)],
                          "scenario": np.repeat([0, 1, 2], 4), "prediction": np.repeat([1, 2, 3], 4)})
    rng = np.random.default_rng(0)
    return ReviewSet(items, rng.integers(0, 256, (12, 6, 6, 1), dtype=np.uint8),
                     rng.standard_normal((12, 2)).astype(np.float32), NAMES)


def test_decide_scenarios_rule(tmp_path):
    review = make_review()
    rows = []
    # scenario 0 (pred 1): 3 of 4 labelled 0 -> disagree 0.75 > 0.5 -> failure, label 0
    for i, lab in enumerate([0, 0, 0, 1]):
        rows += [(f"s000-{i:03d}", f"w{k}", lab) for k in range(3)]
    # scenario 1 (pred 2): 2 of 4 disagree -> exactly 0.5, not > rho -> not a failure
    for i, lab in enumerate([3, 3, 2, 2]):
        rows += [(f"s001-{i:03d}", f"w{k}", lab) for k in range(3)]
    # scenario 2 (pred 3): two 'none' items are not counted; 2 of 2 labelled disagree -> failure, label 0
    for i, lab in enumerate([NONE, NONE, 0, 0]):
        rows += [(f"s002-{i:03d}", f"w{k}", lab) for k in range(3)]
    table, items = decide_scenarios(review, votes(rows), rho=0.5)
    t = table.set_index("scenario")
    assert t["is_failure"].tolist() == [True, False, True]
    assert t.loc[0, "label"] == 0 and t.loc[2, "n_labelled"] == 2 and t.loc[1, "disagree_frac"] == 0.5
    assert items["in_failure_scenario"].sum() == 8
    with pytest.raises(ValueError, match="unknown ids"):
        decide_scenarios(review, votes([("zzz", "w", 1)]))
    out = export_review(review, tmp_path / "rev")
    assert (out / "images" / "s000-000.png").is_file() and (out / "votes_template.csv").is_file()
    back = load_review(out)
    np.testing.assert_array_equal(back.images, review.images)
    assert back.items["item_id"].tolist() == review.items["item_id"].tolist()


CLOTHES = ("T-shirt", "Trouser", "Bag")


def test_votes_by_class_name_any_case_and_one_voter(tmp_path):
    p = tmp_path / "v.csv"
    # No annotator column: one voter; names in any case, ids and 'none' mix.
    p.write_text("item_id,label\na, trouser \nb,BAG\nc,0\nd,None of the above\n")
    v = read_votes_csv(p, CLOTHES)
    assert v["label"].tolist() == [1, 2, 0, NONE] and set(v["annotator"]) == {"voter"}
    assert majority_vote(v, 3)["agreement"].eq(1.0).all()
    p.write_text("item_id,label\na,Trouser\na,Bag\n")
    with pytest.raises(ValueError, match="without an annotator column each item_id may appear once"):
        read_votes_csv(p, CLOTHES)
    # A blank annotator column (the votes template) is one voter too.
    p.write_text("item_id,image,annotator,label\na,images/a.png,,bag\n")
    assert read_votes_csv(p, CLOTHES)["annotator"].tolist() == ["voter"]


def test_unknown_name_names_value_and_allowed(tmp_path):
    p = tmp_path / "v.csv"
    p.write_text("item_id,annotator,label\na,x,Trouser\nb,x,Sneaker\n")
    with pytest.raises(ValueError) as err:
        read_votes_csv(p, CLOTHES)
    msg = str(err.value)
    assert "row 3" in msg and "'Sneaker'" in msg and "'T-shirt', 'Trouser', 'Bag'" in msg and "\n" not in msg
    # Names that differ only in case must be written exactly.
    assert parse_label("cat", ("cat", "Cat")) == 0
    with pytest.raises(ValueError, match="got 'CAT'"):
        parse_label("CAT", ("cat", "Cat"))


@pytest.mark.parametrize("content", [b"\x00\xff\xfe garbage \x81\x82", b"", b"a,b\n1,2\n", b'item_id,label\n"a,1\n'])
def test_bad_vote_file_is_one_value_error(tmp_path, content):
    p = tmp_path / "bad.csv"
    p.write_bytes(content)
    with pytest.raises(ValueError) as err:
        read_votes_csv(p, CLOTHES)
    assert "bad.csv" in str(err.value) and "\n" not in str(err.value)
