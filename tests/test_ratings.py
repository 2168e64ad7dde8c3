"""ACR ratings, MOS, S selection, agreement and CSV import/export."""
from __future__ import annotations

import io
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from blindspots.human.ratings import Ratings, krippendorff_alpha, parse_score

NAN = np.nan
# Krippendorff (2011) "Computing Krippendorff's alpha-reliability", the 4-observer example.
KRIPP = np.array([
    [1, 2, 3, 3, 2, 1, 4, 1, 2, NAN, NAN, NAN],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, NAN, 3],
    [NAN, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, NAN],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, NAN],
])


@pytest.mark.parametrize("level, expected", [("nominal", 0.743), ("ordinal", 0.815), ("interval", 0.849)])
def test_krippendorff_reference_values(level: str, expected: float) -> None:
    assert krippendorff_alpha(KRIPP, level) == pytest.approx(expected, abs=5e-4)


def test_mos_and_ood_excludes() -> None:
    r = Ratings([("a", "r1", 1), ("a", "r2", 2), ("b", "r1", 5), ("b", "r2", "ood"),
                 ("c", "r1", 3), ("c", "r2", 3), ("d", "r1", 2)])
    mos = r.mos()
    assert mos["a"] == 1.5 and math.isinf(mos["b"]) and mos["c"] == 3 and mos["d"] == 2
    assert r.out_of_domain() == {"b"}
    s = r.select_worst(3)
    assert list(s["image_id"]) == ["a", "d", "c"]
    assert list(s["n_ratings"]) == [2, 1, 2]
    assert list(r.select_worst(10, min_raters=2)["image_id"]) == ["a", "c"]  # d has 1 rating, b is ood
    assert r.select_worst(0).empty


def test_ties_follow_candidate_order_and_replace() -> None:
    r = Ratings([("x", "r1", 2), ("y", "r1", 2), ("z", "r1", 2)])
    assert list(r.select_worst(2)["image_id"]) == ["x", "y"]
    assert list(r.select_worst(2, candidates=["z", "y", "x", "w"])["image_id"]) == ["z", "y"]
    r.add("x", "r1", 1)  # a rater changes their answer: the last one wins
    assert len(r) == 3 and r.mos()["x"] == 1
    with pytest.raises(ValueError, match="candidates"):
        r.select_worst(2, candidates=["x"])


def test_empty_ratings() -> None:
    r = Ratings()
    assert r.mos().empty and r.select_worst(5).empty
    ag = r.agreement()
    assert ag["n_images"] == 0 and math.isnan(ag["alpha_ordinal"])


@pytest.mark.parametrize("bad", [0, 6, 2.5, "good", "", None, True, float("nan"), "-inf"])
def test_bad_scores(bad: object) -> None:
    with pytest.raises(ValueError, match="score"):
        parse_score(bad)
    with pytest.raises(ValueError):
        Ratings([("a", "r", bad)])


def test_bad_ids() -> None:
    with pytest.raises(ValueError, match="image_id"):
        Ratings().add("", "r", 3)
    with pytest.raises(ValueError, match="rater"):
        Ratings().add("a", None, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="n4"):
        Ratings().select_worst(-1)


def test_csv_round_trip(tmp_path) -> None:
    r = Ratings()
    r.add("dir/a.png", "alice", 4, timestamp="2026-01-01T00:00:00Z")
    r.add("dir/a.png", "bob", "ood")
    r.add("b,with comma.png", "alice", 1)
    p = tmp_path / "ratings.csv"
    r.to_csv(p)
    back = Ratings.from_csv(p)
    pd.testing.assert_frame_equal(back.frame, r.frame)
    text = p.read_text()
    assert text.splitlines()[0] == "image_id,rater,score,timestamp" and ",ood," in text


@pytest.mark.parametrize("text, match", [
    ("image,rater,score\na,r,3\n", "columns"),
    ("image_id,rater,score\na,r,7\n", "line 2"),
    ("image_id,rater,score\na,r,3\n,r,2\n", "image_id: line 3"),
    ("image_id,rater,score\na,,2\n", "rater: line 2"),
    ("image_id,rater,score\na,r,2\na,r,3\n", "one rating per"),
    ("image_id,rater,score\na,r,2,extra\n", "fields"),
])
def test_csv_errors(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        Ratings.from_csv(io.StringIO(text))


def test_agreement_perfect_and_ood_share() -> None:
    rows = [(f"i{j}", r, 1 + j % 5) for j in range(20) for r in ("r1", "r2", "r3")]
    rows += [("x", "r1", "ood"), ("x", "r2", "ood"), ("y", "r1", "ood"), ("y", "r2", 3)]
    ag = Ratings(rows).agreement()
    assert ag["spearman_mean"] == pytest.approx(1.0) and ag["kendall_mean"] == pytest.approx(1.0)
    assert ag["alpha_ordinal"] == pytest.approx(1.0) and ag["alpha_interval"] == pytest.approx(1.0)
    assert ag["ood_flagged"] == 2 and ag["ood_unanimous_share"] == 0.5
    assert ag["n_raters"] == 3


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 9), st.integers(0, 3), st.integers(1, 5)), min_size=1, max_size=60),
       st.integers(0, 12))
def test_selection_invariants(rows: list, n4: int) -> None:
    r = Ratings((f"img{i}", f"r{j}", s) for i, j, s in rows)
    s = r.select_worst(n4)
    mos = r.mos()
    assert len(s) == min(n4, len(mos))
    assert s["mos"].is_monotonic_increasing
    if len(s) and len(s) < len(mos):
        assert s["mos"].max() <= mos.drop(s["image_id"]).min()
    alpha = krippendorff_alpha(r.matrix().to_numpy(dtype=float).T, "ordinal")
    assert math.isnan(alpha) or alpha <= 1.0 + 1e-9


@pytest.mark.parametrize("answer, stored", [(3, 3), ("3", 3), ("ood", "ood"), ("Out-of-domain", "ood"),
                                            ("out_of_domain", "ood"), ("inf", "ood"), ("infinity", "ood"),
                                            (float("inf"), "ood")])
def test_every_rating_entry_point_reads_one_rule(tmp_path, answer: object, stored: object) -> None:
    """A CSV, the web app's rating form and the project store accept the same answers and synonyms."""
    from blindspots.app.routers.rate import RatingIn
    from blindspots.human.scores import rating_answer
    from blindspots.loop.answers import Answers
    from blindspots.loop.store import Store

    assert rating_answer(answer) == stored
    assert Ratings([("a.png", "r", answer)]).frame["score"].iloc[0] == (math.inf if stored == "ood" else stored)
    if not isinstance(answer, float) and answer != "3":  # JSON: a number, or text for out-of-domain
        assert RatingIn(round=0, image_id="a.png", score=answer).score == stored
    store = Store(tmp_path)
    store.create_schema()
    answers = Answers(store)
    answers.add_ratings([(0, "a.png", "r", answer)])
    row = answers.ratings_for_round(0).iloc[0]
    assert (bool(row["out_of_domain"]), None if row["out_of_domain"] else int(row["score"])) == \
        (stored == "ood", None if stored == "ood" else stored)


@pytest.mark.parametrize("bad", [0, 6, "good", "", True])
def test_every_rating_entry_point_refuses_the_same_answers(tmp_path, bad: object) -> None:
    from blindspots.app.routers.rate import RatingIn
    from blindspots.loop.answers import Answers
    from blindspots.loop.store import Store

    store = Store(tmp_path)
    store.create_schema()
    answers = Answers(store)
    with pytest.raises(ValueError, match=r"score \(row 0\): expected an integer 1..5 or 'ood'"):
        answers.add_ratings([(0, "a.png", "r", bad)])
    # pydantic's ValidationError is a ValueError; a bool is refused by the field's type before the rule
    with pytest.raises(ValueError, match=None if isinstance(bad, bool) else "expected an integer 1..5 or 'ood'"):
        RatingIn(round=0, image_id="a.png", score=bad)
