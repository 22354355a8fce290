"""The live progress line of `raptor solve`: the current phase, its elapsed time (against
its limit, for CP-SAT), the incumbent and bound when the solver reports them, and the total
time. Drawn on stderr only when stderr is a terminal; otherwise (pipes, files, CI, `--json`)
nothing is printed at all.

It is the `raptor.solve.Progress` hook: `solve()` calls it at each phase. A solver that can
report during its search (a CP-SAT solution callback) calls it again with `incumbent_ns`
and `bound_ns`; until one does, the CP-SAT phase shows elapsed / limit. With
`RAPTOR_PROGRESS=lines` each phase and each new best schedule is a line on stderr instead
(`raptor.ui.interrupt.PROGRESS_ENV`), terminal or not."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from raptor.ui.interrupt import ENDING, phase_lines, searches_stopped


class LiveProgress:
    """Use as a context manager around the work; call it to start a phase."""

    def __init__(self, console: Console, enabled: bool = True) -> None:
        self.lines = phase_lines()
        self.enabled = enabled and console.is_terminal and not self.lines
        self.console = console
        self.start = time.perf_counter()
        self.phase = "starting"
        self.phase_start = self.start
        self.limit_s: float | None = None
        self.incumbent_ns: int | None = None
        self.bound_ns: int | None = None
        self.stopped = 0
        """Searches Ctrl-C had ended when this phase began."""
        self.spinner = Spinner("dots")
        self.live: Live | None = None

    def __call__(self, msg: str, /, *, limit_s: float | None = None,
                 incumbent_ns: int | None = None, bound_ns: int | None = None) -> None:
        new = msg != self.phase
        if new:
            self.phase, self.phase_start = msg, time.perf_counter()
            self.stopped = searches_stopped()
            self.limit_s = self.incumbent_ns = self.bound_ns = None
        self.limit_s = self.limit_s if limit_s is None else limit_s
        found = incumbent_ns is not None and incumbent_ns != self.incumbent_ns
        self.incumbent_ns = self.incumbent_ns if incumbent_ns is None else incumbent_ns
        self.bound_ns = self.bound_ns if bound_ns is None else bound_ns
        if self.lines and (new or found):
            best = f": best {self.incumbent_ns:,} ns" if found else ""
            self.console.print(f"raptor: phase: {msg}{best}", markup=False, highlight=False,
                               soft_wrap=True)

    def line(self) -> str:
        """The text after the spinner (also what a test can read without a terminal)."""
        now = time.perf_counter()
        phase = now - self.phase_start
        parts = [self.phase, f"{phase:.1f} s of {self.limit_s:g} s" if self.limit_s is not None
                 else f"{phase:.1f} s"]
        if self.incumbent_ns is not None:
            parts.append(f"best {self.incumbent_ns:,} ns")
        if self.bound_ns is not None:
            parts.append(f"bound {self.bound_ns:,} ns")
        if searches_stopped() > self.stopped:
            parts.append(ENDING)
        return " · ".join(parts) + f"   (total {now - self.start:.1f} s)"

    def __rich__(self) -> RenderableType:
        self.spinner.update(text=Text(self.line()))
        return self.spinner

    def __enter__(self) -> LiveProgress:
        if self.enabled:
            self.live = Live(self, console=self.console, refresh_per_second=8, transient=True)
            try:
                self.live.start()
            except BaseException:  # Ctrl-C once it hid the cursor: `__exit__` will not run
                self.__exit__(None, None, None)
                raise
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
