"""Errors of experiment files: every problem carries its YAML path and line."""

from __future__ import annotations

from dataclasses import dataclass

Loc = tuple[str | int, ...]


@dataclass(frozen=True)
class Problem:
    """One validation error: YAML path, line (1-based, 0 if unknown) and message."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.line}: {self.path or '<top>'}: {self.message}"


class SpecError(ValueError):
    """An experiment file is invalid; ``problems`` lists every error found."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {source}:{p}" for p in problems)
        super().__init__(f"{len(problems)} error(s) in {source}:\n{lines}")


def dotted(loc: Loc) -> str:
    """``("a", 0, "b")`` -> ``"a.0.b"``."""
    return ".".join(str(x) for x in loc)


def unique(problems: list[Problem]) -> list[Problem]:
    """The problems without repeats (same path, line and message), in their order."""
    return list(dict.fromkeys(problems))
