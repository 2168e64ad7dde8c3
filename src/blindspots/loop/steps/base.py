"""`Step`: what every step of a round is (a name, its recorded settings, `run`)."""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from blindspots.loop.context import LoopContext, Status

__all__ = ["Step"]


class Step(ABC):
    """One step of a round of Algorithm 1 (or of the label plan).

    name: its name in the store and in the plans (`STEPS`, `LABEL_STEPS`).
    human: True when it waits for people's answers (ratings, masks); `run` then returns a
    `Status` saying what is awaited until every answer is in.
    `settings` are recorded in the store when the step starts; `run` does the step and returns
    its result (a JSON-able dict recorded when it ends). Every step is idempotent: the driver runs
    it again after a crash or a failure.
    """

    name: ClassVar[str]
    human: ClassVar[bool] = False

    def settings(self, ctx: LoopContext) -> dict:
        """The settings this step runs with (recorded in the store, never read back)."""
        return {}

    @abstractmethod
    def run(self, ctx: LoopContext, i: int, seed: int) -> dict | Status:
        """Run the step for round i with its own seed (`step_seed`)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
