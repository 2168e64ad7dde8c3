"""A typo in a model spec's option names the option meant (difflib), in the one-line error."""
from __future__ import annotations

import pytest

from blindspots.models.spec_syntax import OPTIONS, parse_option


@pytest.mark.parametrize(("typo", "meant"), [("max_sid", "max_side"), ("outptu", "output"), ("classess", "classes"),
                                             ("mean_", "mean"), ("channel", "channels")])
def test_a_typo_names_the_option_meant(typo: str, meant: str) -> None:
    assert meant in OPTIONS
    with pytest.raises(ValueError, match=rf"got {typo!r} in 'm.onnx\?{typo}=1'; did you mean {meant!r}\?$"):
        parse_option(typo, "1", f"m.onnx?{typo}=1")


def test_an_unrelated_key_gets_no_guess() -> None:
    with pytest.raises(ValueError, match=r"got 'zzz'$"):
        parse_option("zzz", "1")
