"""What people spend: human cost = ratings x c_rate + masks x c_mask, in label-editor actions.

The unit is the action of the scripted annotator of `benchmarks/labeling.py`: a key press, a click, a
brush stroke or a save each count one. The defaults are measured, not guessed:

- `C_MASK_EDITOR = 31.6`: mean actions per mask to reach mean IoU >= 0.9 with the full label editor
  (start from the target's prediction, superpixels, competitor regions), `benchmarks/labeling.py`,
  20 MAD candidates of 64 x 64 street scenes, Chromium. `C_MASK_EMPTY = 222.7`: the same from an empty
  canvas with the brush alone (a tool without a prediction start).
- `C_RATE = 1.0`: measured by `benchmarks/rating_cost.py`: the same scripted annotator rated the 24
  candidates of a sample project on the app's rating page in Chromium (headless, Playwright): 1.00
  action per rating in both runs (seeds 0 and 1; one key press, 1-5 or O; the page moves on by itself,
  `app/static/rate.js`).

- `C_REGION = 1.0`: measured by `benchmarks/region_cost.py`: the same scripted annotator answered the 64
  region questions (8 images of S, K = 8 regions each) of a sample project on the app's region page in
  Chromium: 1.00 action per answer in both runs (seeds 0 and 1; one key: Enter for the preselected guess, a
  digit for another class, M for mixed / unsure; the page moves on by itself, `app/static/regions.js`),
  0.032 and 0.037 s per answer. An image labelled by K regions costs K x C_REGION (8 against a mask's 31.6).

Seconds, the same two runs (AMD EPYC, 2 cores shared, 1-minute load average 7.5 and 9.4), means of the
two: `C_RATE_SECONDS = 0.045` per rating (0.038, 0.051; image shown to next image shown, the next images
preloaded) and `C_MASK_SECONDS = 2.78` per mask with the full editor (2.23, 3.33; 10 masks of each
project's S, 40.5 and 59.4 actions each). They are the tool's mechanical time with an annotator that
decides at once: a person's time to look and decide is not in them, so `LabelCost.in_seconds()` is a
lower bound that mostly says how light each page is.

MAD pays for the ratings of M and the masks of S; an active-learning baseline pays for masks of
everything it picks (no rating step). Seconds per action differ by person and tool; the ratio
c_mask / c_rate (31.6 with the editor; 40.5-59.4 in actions and 58.5-65.3 in seconds in the rating runs'
side-by-side) is what decides how much a rating step saves.

Public API: `LabelCost(c_rate=C_RATE, c_mask=C_MASK_EDITOR, unit="actions")`, `LabelCost.in_seconds()`,
`.of(ratings, masks) -> float`, `.masks_for(budget, ratings=0) -> int`.
"""
from __future__ import annotations

from dataclasses import dataclass

from blindspots._validation import check_int, check_number

C_RATE = 1.0
C_MASK_EDITOR = 31.6
C_MASK_EMPTY = 222.7
C_RATE_SECONDS = 0.045
C_MASK_SECONDS = 2.78
C_REGION = 1.0


@dataclass(frozen=True)
class LabelCost:
    """Human cost of ratings and masks.

    c_rate: cost of one rating (one person rating one image). c_mask: cost of one pixel mask.
    unit: what the costs count (default "actions" of the label editor).
    """

    c_rate: float = C_RATE
    c_mask: float = C_MASK_EDITOR
    unit: str = "actions"

    def __post_init__(self) -> None:
        check_number(self.c_rate, "c_rate", low=0)
        check_number(self.c_mask, "c_mask", low=0)

    @classmethod
    def in_seconds(cls) -> "LabelCost":
        """The measured seconds per rating and per mask (the scripted annotator's, a lower bound)."""
        return cls(c_rate=C_RATE_SECONDS, c_mask=C_MASK_SECONDS, unit="seconds")

    def of(self, ratings: int, masks: int) -> float:
        """ratings x c_rate + masks x c_mask (ratings: answers, i.e. images x raters)."""
        return check_int(ratings, "ratings", minimum=0) * self.c_rate + check_int(masks, "masks", minimum=0) * self.c_mask

    def masks_for(self, budget: float, ratings: int = 0) -> int:
        """How many masks `budget` buys once `ratings` ratings are paid (0 when they cost it all)."""
        check_number(budget, "budget", low=0)
        if self.c_mask <= 0:
            raise ValueError(f"c_mask: expected a positive cost to divide a budget by, got {self.c_mask}")
        return max(0, int((budget - self.of(ratings, 0)) // self.c_mask))
