"""The one base of every spec model: immutable, and an unknown key is an error."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Base for spec models: immutable (``frozen``), unknown keys are errors (``forbid``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
