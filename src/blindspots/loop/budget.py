"""How many masks a round asks for: n4 (the size of S) against how many candidates mining can give.

MAD picks at most n3 images per (competitor, class, direction), so M(i) holds at most 2 * m * C * n3 images
(m competitors, C classes; fewer after duplicates and the content constraint). The paper's n4 = 100 assumes an M
many times larger (21 classes, several competitors); with one competitor and two classes, M has at most 100
images and n4 = 100 makes every candidate a mask to draw, which one person rating alone does not expect. So
`init` checks n4 before any round runs: without `--n4` it takes a quarter of that bound (at most the paper's 100),
and an explicit `--n4` at or above the bound is kept with a warning.
"""
from __future__ import annotations

PAPER_N4 = 100
#: S is this share of the most candidates MAD can mine, when the paper's n4 would take all of them
SHARE_OF_CANDIDATES = 4


def max_candidates(competitors: int, classes: int, n3: int, n: int | None = None) -> int:
    """The most candidates a round's mining can pick: 2 * competitors * classes * n3 (MAD's budget, also the
    baselines' when `mining.n` is None), or `n` when a budget is set."""
    for name, v in (("competitors", competitors), ("classes", classes), ("n3", n3)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
    return int(n) if n is not None else 2 * competitors * classes * n3


def choose_n4(requested: int | None, bound: int) -> tuple[int, str | None]:
    """(n4, a one-line note or None). requested: `--n4` as given (None: not given); bound: `max_candidates`.

    Not given: the paper's 100, or a quarter of `bound` when 100 would take every candidate. Given: kept; the
    note warns when it is not less than `bound` (then every candidate is pixel-labelled).
    """
    if requested is None:
        if PAPER_N4 < bound:
            return PAPER_N4, None
        n4 = max(1, bound // SHARE_OF_CANDIDATES)
        return n4, (f"n4 = {n4} masks per round: the paper's {PAPER_N4} is not less than the at most {bound} "
                    f"candidates a round can mine here, so every candidate would need a mask (--n4 N sets it)")
    if requested >= bound:
        return requested, (f"warning: --n4 {requested} is not less than the at most {bound} candidates a round can "
                           f"mine here: every candidate will be pixel-labelled (a smaller --n4 labels only the "
                           f"lowest-rated)")
    return requested, None
