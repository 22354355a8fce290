"""Simulator errors: one headline plus one line per core or channel at fault."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raptor.sim.report import SimReport


class SimError(Exception):
    """A scheduled program the simulator cannot run (capacity, unmatched channels, ...)."""

    def __init__(self, headline: str, lines: list[str] | None = None) -> None:
        self.headline = headline
        self.lines = list(lines or [])
        super().__init__("\n".join([headline, *self.lines]))


class Deadlock(SimError):
    """No core can progress and nothing is in flight. `lines` has one entry per blocked
    core saying what it waits for; `report` holds the figures up to the stall."""

    def __init__(self, time_ns: int, lines: list[str], report: SimReport) -> None:
        super().__init__(f"deadlock at {time_ns} ns: {len(lines)} core(s) blocked", lines)
        self.time_ns = time_ns
        self.report = report


class Race(SimError):
    """A load inside a stream read shared memory that no store of its own inference wrote
    (a missing or misplaced `pim.wait`): the data would belong to another inference."""
