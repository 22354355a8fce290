"""Ctrl-C in the `raptor` program, one behaviour everywhere:

* during a CP-SAT search (latency or pipeline model) the first Ctrl-C ends the search,
  which returns its best schedule so far; the run goes on and its status says INTERRUPTED;
* anywhere else, and for any further Ctrl-C, the program stops: `KeyboardInterrupt` in
  the main thread, which `raptor.cli.main` turns into one line and exit 130 after the
  progress line is taken down (cursor shown again) and half-written files are removed
  (output files are written to a temporary name and renamed, `raptor.fileio`); also when
  the interrupt lands in code that swallows it or raises another exception in its place
  (`Interrupts.stopping` says the program was told to stop);
* a Ctrl-C arriving while the program is already stopping ends it at once (exit 130).

Why a thread: while CP-SAT searches, the main thread is inside the solver's C++ code, and
Python runs its signal handlers only between bytecodes of the main thread, i.e. after the
search ended on its own. Python's C-level handler also writes each signal's number to the
wakeup file descriptor at once; a daemon thread reads it and decides, and the Python-level
handler only raises once the thread has decided that the program stops."""

from __future__ import annotations

import _thread
import itertools
import os
import signal
import socket
import sys
import threading
from types import FrameType, TracebackType

EXIT_INTERRUPTED = 130
"""128 + SIGINT, as a shell reports a program that Ctrl-C stopped."""

MESSAGE = "raptor: interrupted"
SHOW_CURSOR = "\x1b[?25h"


PROGRESS_ENV = "RAPTOR_PROGRESS"
"""`RAPTOR_PROGRESS=lines`: each phase of `raptor solve` and each new best schedule or bound
of a search as a line on stderr (`raptor: phase: ...`), for logs and tests, in place of
the live line."""


def phase_lines() -> bool:
    return os.environ.get(PROGRESS_ENV) == "lines"


def started_as_program() -> bool:
    """Whether this process is the `raptor` program (the console script, `python -m
    raptor.cli`), not a program that imports Raptor, whose Ctrl-C is its own business."""
    argv = getattr(sys, "orig_argv", sys.argv)
    module = any(a == "-m" and b in ("raptor", "raptor.cli") for a, b in itertools.pairwise(argv))
    return module or os.path.basename(sys.argv[0] if sys.argv else "") == "raptor"


def at_startup() -> None:
    """While the program loads (numpy, ONNX, rich: seconds), Ctrl-C ends it with the one line
    and exit 130 instead of an import traceback; `Interrupts` takes over in `main`."""
    if started_as_program() and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, lambda signum, frame: _exit_now())
        if phase_lines():
            os.write(2, b"raptor: phase: starting\n")


ENDING = "Ctrl-C: ending the search with its best schedule (Ctrl-C again stops)"
"""What the progress line says once the first Ctrl-C ended a search."""


def _stop_search() -> bool:
    """End a running CP-SAT search, if the solver is loaded at all (importing it here
    would cost the time of loading OR-Tools)."""
    watch = sys.modules.get("raptor.solver.watch")
    stopped = bool(watch is not None and watch.stop_search())
    if stopped and phase_lines():
        os.write(2, f"raptor: phase: {ENDING}\n".encode())
    return stopped


def searches_stopped() -> int:
    """`raptor.solver.watch.searches_stopped`, 0 while OR-Tools is not loaded."""
    watch = sys.modules.get("raptor.solver.watch")
    return 0 if watch is None else int(watch.searches_stopped())


class Interrupts:
    """Installs the behaviour above for the duration of a `with` block (main thread only;
    elsewhere, e.g. a command run from a worker thread, it changes nothing)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.count = 0
        self.stopping = False
        self.raised = False
        self.injected = 0
        self.active = False

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is not threading.main_thread():
            return self
        self.reader, self.writer = socket.socketpair()
        self.writer.setblocking(False)
        self.old_fd = signal.set_wakeup_fd(self.writer.fileno(), warn_on_full_buffer=False)
        self.old_handler = signal.signal(signal.SIGINT, self._handler)
        self.active = True
        threading.Thread(target=self._watch, name="raptor-interrupts", daemon=True).start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if not self.active:
            return
        self.active = False
        signal.signal(signal.SIGINT, self.old_handler)
        signal.set_wakeup_fd(self.old_fd)
        self.writer.close()  # the thread reads end of file and returns
        # (the reader is the thread's to close)

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        """Python's handler, in the main thread: raise once the thread decided to stop."""
        with self.lock:
            if not self.stopping or self.raised:
                return
            self.raised = True
        raise KeyboardInterrupt

    def _watch(self) -> None:
        # SIGINT goes to the main thread (or stays pending while the main thread holds it
        # back, as `raptor sweep` does while its cluster starts), never to this one
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        with self.reader:
            while data := self.reader.recv(64):
                for number in data:
                    if number == signal.SIGINT:
                        self._signal()

    def _signal(self) -> None:
        """One Ctrl-C: end the search, or stop the program, or end it now."""
        with self.lock:
            if self.injected:  # our own `interrupt_main` also passes the wakeup fd
                self.injected -= 1
                return
            self.count += 1
            if self.stopping:
                _exit_now()
            if self.count == 1 and _stop_search():
                return
            self.stopping = True
            self.injected += 1
        _thread.interrupt_main(signal.SIGINT)


def _exit_now() -> None:
    """A Ctrl-C while stopping: the cursor shown again, one line, exit 130 at once."""
    text = (SHOW_CURSOR if os.isatty(2) else "") + MESSAGE + "\n"
    try:
        os.write(2, text.encode())
    finally:
        os._exit(EXIT_INTERRUPTED)
