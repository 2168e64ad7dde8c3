"""blindspots.labels as a drop-in for cleanlab.segmentation (cleanlab 2.9, a test-only dependency).

What cleanlab accepts gives cleanlab's numbers: unnormalised pred_probs (np.random.random arrays, as in
cleanlab's own tests) with one warning, class ids absent from the data, and verbose output on stdout.
A short script in the style of cleanlab's segmentation tutorial runs with only its import line changed.
"""
from __future__ import annotations

import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

cleanlab = pytest.importorskip("cleanlab")
from cleanlab.segmentation import filter as cl_filter  # noqa: E402
from cleanlab.segmentation import rank as cl_rank  # noqa: E402
from cleanlab.segmentation import summary as cl_summary  # noqa: E402

from blindspots.labels import filter as bs_filter  # noqa: E402
from blindspots.labels import rank as bs_rank  # noqa: E402
from blindspots.labels import summary as bs_summary  # noqa: E402

# calls not checking the warning itself (`_one_warning` records it under its own filter)
pytestmark = pytest.mark.filterwarnings("ignore:pred_probs. probabilities do not sum to 1:UserWarning")

#: cleanlab prints this when n_jobs=None and psutil is missing (about its process pool, which we do not
#: have); the one stdout line we do not reproduce (docs/labels.md)
_POOL_NOTICE = "Multiprocessing will default to using the number of logical cores"


def _random_unnormalised(seed: int, n: int, k: int, h: int, w: int, dtype=np.float64, scale: float = 1.0):
    """cleanlab's test inputs: labels uniform in 0..K-1, pred_probs = np.random.random (rows do not sum to 1)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, k, (n, h, w)), (rng.random((n, k, h, w)) * scale).astype(dtype)


def _one_warning(fn, *args, **kwargs):
    """Call fn; return (result, the UserWarnings about sums it emitted)."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        res = fn(*args, **kwargs)
    return res, [r for r in rec if issubclass(r.category, UserWarning) and "sum to 1" in str(r.message)]


def _stdout_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if not line.startswith(_POOL_NOTICE)]


@pytest.mark.parametrize("shape", [(2, 2, 9, 7), (3, 4, 13, 47), (2, 3, 1, 1), (4, 5, 16, 24)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_unnormalised_probabilities_give_cleanlabs_numbers(shape, dtype):
    labels, p = _random_unnormalised(sum(shape), *shape, dtype=dtype, scale=2.0 if dtype == np.float32 else 1.0)
    img_cl, pix_cl = cl_rank.get_label_quality_scores(labels, p, verbose=False)
    (img, pix), warned = _one_warning(bs_rank.get_label_quality_scores, labels, p, verbose=False)
    assert len(warned) == 1 and warned[0].filename == __file__  # one warning, pointing at the caller
    np.testing.assert_allclose(img, img_cl, rtol=1e-12, atol=0)
    np.testing.assert_array_equal(pix, pix_cl)

    theirs = cl_filter.find_label_issues(labels, p, verbose=False, n_jobs=1)
    for batch_size in (None, 1, 500):
        ours, warned = _one_warning(bs_filter.find_label_issues, labels, p, verbose=False, batch_size=batch_size)
        assert len(warned) == 1
        np.testing.assert_array_equal(ours, theirs)  # continuous random values: no ties at the cut-off

    img_cl, pix_cl = cl_rank.get_label_quality_scores(labels, p, method="num_pixel_issues", verbose=False, n_jobs=1)
    (img, pix), warned = _one_warning(bs_rank.get_label_quality_scores, labels, p, method="num_pixel_issues",
                                      verbose=False)
    assert len(warned) == 1
    np.testing.assert_allclose(img, img_cl, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(pix, pix_cl)


def test_unnormalised_memmap_and_downsampled_binary_labels(tmp_path):
    """cleanlab's memmap example (np.random.rand saved to .npy, read with mmap_mode='r') and
    downsample=2 on two classes (where block majority and cleanlab's rounded block mean agree)."""
    labels, p = _random_unnormalised(7, 20, 2, 6, 8)
    np.save(tmp_path / "p.npy", p)
    np.save(tmp_path / "l.npy", labels)
    p_m, l_m = np.load(tmp_path / "p.npy", mmap_mode="r"), np.load(tmp_path / "l.npy", mmap_mode="r")
    theirs = cl_filter.find_label_issues(l_m, p_m, verbose=False, n_jobs=1, batch_size=50)
    for batch_size in (1, 50, 100):
        ours, warned = _one_warning(bs_filter.find_label_issues, l_m, p_m, verbose=False, batch_size=batch_size)
        assert len(warned) == 1
        np.testing.assert_array_equal(ours, theirs)
    theirs = cl_filter.find_label_issues(labels, p, verbose=False, n_jobs=1, downsample=2)
    ours = bs_filter.find_label_issues(labels, p, verbose=False, downsample=2)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("fn", ["find_label_issues", "softmin", "num_pixel_issues"])
def test_invalid_values_still_raise(fn):
    labels, p = _random_unnormalised(3, 2, 3, 8, 8)
    call = {"find_label_issues": lambda lab, q: bs_filter.find_label_issues(lab, q, verbose=False),
            "softmin": lambda lab, q: bs_rank.get_label_quality_scores(lab, q, verbose=False),
            "num_pixel_issues": lambda lab, q: bs_rank.get_label_quality_scores(lab, q, verbose=False,
                                                                                method="num_pixel_issues")}[fn]
    # NaN / inf / negative in the label's own class (the values every method reads), on a row softmin
    # does not read whole (row 3), and negative values anywhere on row 0 (a row every method checks)
    lab0 = labels[0, 3, 5]
    for bad, msg in ((np.nan, "finite"), (np.inf, "finite"), (-0.2, ">= 0")):
        q = p.copy()
        q[0, lab0, 3, 5] = bad
        with pytest.raises(ValueError, match=f"pred_probs.*{msg}.*image 0, pixel \\(3, 5\\)"):
            call(labels, q)
    q = p.copy()
    q[1, (labels[1, 0, 2] + 1) % 3, 0, 2] = np.nan  # not the label's class
    with pytest.raises(ValueError, match="pred_probs.*finite.*image 1, pixel \\(0, 2\\)"):
        call(labels, q)
    with pytest.raises(ValueError, match="labels.*class ids"):
        call(np.where(labels == 0, 3, labels), p)


def test_absent_classes_give_empty_masks():
    labels, p = _random_unnormalised(4, 3, 5, 12, 10)
    labels = np.minimum(labels, 2)  # classes 3 and 4 are never given (they may still be predicted)
    issues = bs_filter.find_label_issues(labels, p, verbose=False)
    assert issues.any()
    for c in (0, 2, 3, 4, 5, 300, -1, [0, 3], []):
        ours = bs_summary.filter_by_class(c, issues, labels, p)
        np.testing.assert_array_equal(ours, cl_summary.filter_by_class(c, issues, labels, p))
    assert not bs_summary.filter_by_class(300, issues, labels, p).any()
    q = p.copy()
    q[:, 4] = 0.0  # class 4 neither given nor predicted anywhere
    assert not bs_summary.filter_by_class(4, issues, labels, q).any()


def test_verbose_prints_what_cleanlab_prints(capsys):
    labels, p = _random_unnormalised(5, 3, 4, 16, 12)
    issues = cl_filter.find_label_issues(labels, p, n_jobs=1)  # verbose=True (the default)
    theirs = capsys.readouterr().out
    ours = bs_filter.find_label_issues(labels, p)
    assert capsys.readouterr().out == theirs and theirs.startswith("Total number of examples")
    np.testing.assert_array_equal(ours, issues)

    for kw in ({}, {"class_names": ["a", "b", "c", "d"], "top": 3}, {"exclude": [1]}):
        df_cl = cl_summary.common_label_issues(issues, labels, p, **kw)
        theirs = capsys.readouterr().out
        df = bs_summary.common_label_issues(issues, labels, p, **kw)
        assert capsys.readouterr().out == theirs and theirs.count("\n") == len(df_cl) > 0
        assert df.astype(str).values.tolist() == df_cl.astype(str).values.tolist()
    bs_summary.common_label_issues(issues, labels, p, verbose=False)
    assert capsys.readouterr().out == ""

    for method in ("softmin", "num_pixel_issues"):
        cl_rank.get_label_quality_scores(labels, p, method=method, n_jobs=1)
        theirs = capsys.readouterr().out
        bs_rank.get_label_quality_scores(labels, p, method=method)
        assert capsys.readouterr().out == theirs
    assert theirs  # num_pixel_issues prints its find_label_issues line


#: a script in the style of cleanlab's image-segmentation tutorial (find issues, summarise them by
#: class, look at one class, draw the worst images, rank images by softmin and by issue count), on a
#: toy street scene with cleanlab-test-like unnormalised scores; {imports} is the only line that changes
EXAMPLE = '''
import numpy as np
import matplotlib.pyplot as plt
{imports}

np.random.seed(0)
n, h, w = 6, 16, 24
classes = ["road", "car", "person"]
labels = np.zeros((n, h, w), dtype=int)
labels[:, 6:12, 4:14] = 1
labels[:, 2:14, 17:20] = 2
pred_probs = np.random.random((n, 3, h, w)) / 4
for k in range(3):
    pred_probs[:, k][labels == k] += 0.75
labels[1, 6:12, 4:9] = 0          # half a car left unlabelled
labels[4, 2:8, 17:20] = 1         # part of a person labelled as car

issues = filter.find_label_issues(labels, pred_probs)
print("flagged pixels per image:", issues.sum(axis=(1, 2)).tolist())
df = summary.common_label_issues(issues, labels, pred_probs, class_names=classes, exclude=[], top=5)
print(df.to_string())
car_issues = summary.filter_by_class(classes.index("car"), issues, labels=labels, pred_probs=pred_probs)
bicycle_issues = summary.filter_by_class(7, issues, labels, pred_probs)   # no such class: an empty mask
print("car issues:", int(car_issues.sum()), "bicycle issues:", int(bicycle_issues.sum()))
summary.display_issues(issues, pred_probs=pred_probs, labels=labels, top=2, class_names=classes)

image_scores, pixel_scores = rank.get_label_quality_scores(labels, pred_probs, method="softmin")
print("softmin:", np.round(image_scores, 10).tolist())
print("worst images:", rank.issues_from_scores(image_scores, threshold=0.3).tolist())
print("pixels below 0.1:", int(rank.issues_from_scores(image_scores, pixel_scores, threshold=0.1).sum()))
counts, _ = rank.get_label_quality_scores(labels, pred_probs, method="num_pixel_issues")
print("num_pixel_issues:", np.round(counts, 10).tolist())
two = np.minimum(labels, 1)
coarse = filter.find_label_issues(two, pred_probs[:, :2], downsample=2, batch_size=1000)
print("downsampled, two classes:", coarse.sum(axis=(1, 2)).tolist())
'''


def test_tutorial_style_example_with_only_the_import_line_changed(capsys, monkeypatch):
    monkeypatch.setattr(plt, "show", lambda *a, **k: None)
    outputs = []
    for imports in ("from cleanlab.segmentation import filter, rank, summary",
                    "from blindspots.labels import filter, rank, summary"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exec(compile(EXAMPLE.format(imports=imports), "<example>", "exec"), {"__name__": "example"})
        outputs.append(_stdout_lines(capsys.readouterr().out))
        plt.close("all")
    theirs, ours = outputs
    assert len(theirs) > 10 and "car issues" in "".join(theirs)
    assert ours == theirs
