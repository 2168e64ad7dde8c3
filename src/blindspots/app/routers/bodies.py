"""The one base of every JSON body a write route takes: unknown fields refused, no type conversion.

Why: pydantic's defaults ignore unknown fields (a valid rating with a 10 MB extra field was
stored) and convert between types (`"round": "0"` was taken for round 0, `true` for 1), so a
client's mistake passed silently. With `extra="forbid"` and `strict=True` such a body is a 422
naming the field (app/errors.py).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Body(BaseModel):
    """A write route's JSON body: only the declared fields, each of exactly its declared type."""

    model_config = ConfigDict(extra="forbid", strict=True)
