"""The one rule for reading one ACR answer: an integer 1..5 or out-of-domain, with its synonyms.

Every entry point that takes a rating (CSV import, the web app, the project store, simulated
raters) reads it through `parse_score` / `rating_answer`, so they accept the same answers.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["OUT_OF_DOMAIN", "ACR_LABELS", "OOD_WORDS", "parse_score", "format_score", "rating_answer"]

OUT_OF_DOMAIN = "ood"
ACR_LABELS = {1: "bad", 2: "poor", 3: "fair", 4: "good", 5: "excellent"}
OOD_WORDS = {"ood", "out-of-domain", "out_of_domain", "inf", "+inf", "infinity"}


def parse_score(value: Any, *, where: str = "score") -> float:
    """1..5 (int or integral string) -> float; 'ood' / inf -> +inf; anything else ValueError."""
    if isinstance(value, str):
        v = value.strip().lower()
        if v in OOD_WORDS:
            return math.inf
        try:
            num = float(v)
        except ValueError:
            raise ValueError(f"{where}: expected an integer 1..5 or 'ood', got {value!r}") from None
    elif isinstance(value, (bool, np.bool_)) or value is None:
        raise ValueError(f"{where}: expected an integer 1..5 or 'ood', got {value!r}")
    else:
        num = float(value)
    if math.isinf(num) and num > 0:
        return math.inf
    if not (num == int(num) if math.isfinite(num) else False) or not 1 <= num <= 5:
        raise ValueError(f"{where}: expected an integer 1..5 or 'ood', got {value!r}")
    return float(num)


def format_score(score: float) -> str:
    """A parsed score as text: "ood" or "1".."5" (what CSV files and the store's answers hold)."""
    return OUT_OF_DOMAIN if math.isinf(score) else str(int(score))


def rating_answer(value: Any, *, where: str = "score") -> int | str:
    """One answer as the project store keeps it: 1..5 as int, out-of-domain as "ood" (`parse_score`'s
    rule: "out-of-domain", "inf", +inf ... are out-of-domain too); ValueError naming `where` otherwise."""
    v = parse_score(value, where=where)
    return OUT_OF_DOMAIN if math.isinf(v) else int(v)
