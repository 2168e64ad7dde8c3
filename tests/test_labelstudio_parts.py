"""The parts that need no server: the generated configs read back, config checks, polygon fill,
where the token comes from, and the brush pre-annotation written by Label Studio's own encoder."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.data.classes import Classes
from blindspots.data.formats.labelstudio import annotation_mask
from blindspots.data.formats.labelstudio_config import RATING_CHOICES, labeling_config, rating_config, read_config

CLASSES = Classes(("sky", "road", "car"))


def test_generated_configs_read_back() -> None:
    tags = read_config(labeling_config(CLASSES))
    assert tags.image == "image" and tags.brush == {"tag": list(CLASSES.names)}
    assert tags.polygon == {"poly": list(CLASSES.names)} and not tags.choices
    assert 'background="#' in labeling_config(CLASSES)
    r = read_config(rating_config(CLASSES))
    assert r.choices == {"rating": list(RATING_CHOICES)} and r.brush == {"tag": list(CLASSES.names)}
    with pytest.raises(ValueError, match="label_config: expected a Label Studio labelling config"):
        read_config("<View>")


def test_check_config_names_what_is_wrong() -> None:
    from blindspots.integrations.labelstudio.connect import check_config

    check_config(labeling_config(CLASSES), CLASSES, "masks", 1)
    check_config(rating_config(CLASSES), CLASSES, "ratings", 2)
    with pytest.raises(ValueError, match=r"--masks-project: .* project 3 .* got a labelling config with Choices"):
        check_config(rating_config(CLASSES).replace("BrushLabels", "Labels"), CLASSES, "masks", 3)
    with pytest.raises(ValueError, match=r"\['car'\] missing"):
        check_config(labeling_config(Classes(("sky", "road"))), CLASSES, "masks", 4)
    with pytest.raises(ValueError, match="--ratings-project"):
        check_config(labeling_config(CLASSES), CLASSES, "ratings", 5)


def test_polygons_fill_and_paint_over_brushes() -> None:
    from blindspots.integrations.labelstudio.tasks import brush_prediction

    m = np.zeros((10, 20), np.uint8)
    results = brush_prediction(m, CLASSES, from_name="tag", to_name="image", model_version="t")["result"]
    square = [[25.0, 20.0], [50.0, 20.0], [50.0, 60.0], [25.0, 60.0]]  # x 5..10, y 2..6 in pixels
    results.append({"type": "polygonlabels", "from_name": "poly", "to_name": "image", "original_width": 20,
                    "original_height": 10, "value": {"points": square, "polygonlabels": ["car"]}})
    got = annotation_mask(results, CLASSES)
    assert got.shape == (10, 20) and (got[3:6, 6:10] == 2).all() and (got[:, :4] == 0).all() and (got[8:] == 0).all()
    with pytest.raises(ValueError, match="truck"):
        annotation_mask([dict(results[-1], value={"points": square, "polygonlabels": ["truck"]})], CLASSES)
    assert annotation_mask([], CLASSES) is None


def test_prediction_is_label_studios_own_rle() -> None:
    from label_studio_sdk.converter.brush import decode_rle

    from blindspots.integrations.labelstudio.tasks import brush_prediction

    rng = np.random.default_rng(0)
    m = rng.integers(0, 3, (7, 9)).astype(np.uint8)
    m[0, :] = 255  # ignore pixels are not painted
    pred = brush_prediction(m, CLASSES, from_name="tag", to_name="image", model_version="target_v0", score=0.5)
    assert pred["model_version"] == "target_v0" and pred["score"] == 0.5
    back = np.full(m.shape, 255, np.uint8)
    for r in pred["result"]:
        back[decode_rle(r["value"]["rle"]).reshape(7, 9, 4)[:, :, 3] > 0] = CLASSES.index(r["value"]["brushlabels"][0])
    np.testing.assert_array_equal(back, m)
    np.testing.assert_array_equal(annotation_mask(pred["result"], CLASSES), m)  # our reader agrees


def test_token_from_environment_or_file(tmp_path, monkeypatch) -> None:
    from blindspots.integrations.labelstudio import read_token

    monkeypatch.delenv("LABEL_STUDIO_API_KEY", raising=False)
    with pytest.raises(ValueError, match="environment variable LABEL_STUDIO_API_KEY"):
        read_token()
    monkeypatch.setenv("MY_LS", "abc123")
    assert read_token("MY_LS") == "abc123"
    f = tmp_path / "token"
    f.write_text("  secret-token \n")
    assert read_token(token_file=f) == "secret-token"
    f.write_text("")
    with pytest.raises(ValueError, match="empty file"):
        read_token(token_file=f)
    with pytest.raises(ValueError, match="no such file"):
        read_token(token_file=tmp_path / "none")


def test_cli_has_no_token_option() -> None:
    """The token is never a command-line argument (shell histories, process lists)."""
    from typer.testing import CliRunner

    from blindspots.cli import app

    res = CliRunner().invoke(app, ["labelstudio", "connect", "--help"])
    assert res.exit_code == 0 and "--token-env" in res.output and "--token-file" in res.output
    assert "--token " not in res.output and "--api-key" not in res.output
