"""Run fuzz cases through `raptor.cli.main` in forked worker processes and classify them.

A worker is forked from a fork server (numpy, onnx and OR-Tools preloaded), imports Raptor,
caps its address space with `resource.setrlimit`, and runs one case after another in-process with
file descriptors 1 and 2 redirected to files, so that text printed by native code (a Rust
panic, an onnxruntime log line) is judged too. The parent enforces the per-case timeout:
it asks the worker for a Python stack dump (faulthandler on SIGUSR1), kills it, and starts
a new one. A worker that dies by itself crashed.

Outcomes, worst first:
  hang       no answer within the timeout
  crash      the worker died (signal, abort, allocation failure in native code)
  oom        MemoryError: an allocation beyond the memory cap
  traceback  an exception no check anticipated (Raptor's "internal error" line, or one
             that escaped `main`)
  accepted   exit 0 on an ONNX model that `onnx.checker` rejects
  unclean    exit 1/2 without a clean message: empty, a multi-line message, Python or Rust
             internals in the text, raw warnings, or an exit code other than 0, 1, 2
  error      exit 1/2 with clean one-line messages
  ok         exit 0
"""

from __future__ import annotations

import contextlib
import faulthandler
import gc
import importlib
import multiprocessing
import os
import re
import resource
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

OUTCOMES = ("hang", "crash", "oom", "traceback", "accepted", "unclean", "error", "ok")
FAILURES = ("hang", "crash", "oom", "traceback")
"""Outcomes the fuzz suite must never see."""


@dataclass(frozen=True)
class Case:
    """One mutated input and the command that reads it. Paths in `argv` and `files` are
    relative to the case directory; `{dir}` and `{out}` in argv are replaced by the case
    directory and a fresh, not yet existing output directory."""

    klass: str
    mutator: str
    index: int
    files: dict[str, bytes]
    argv: tuple[str, ...]
    invalid: str | None = None
    """Why `onnx.checker` rejects the case's model (ONNX cases), else None."""

    @property
    def name(self) -> str:
        return f"{self.klass}#{self.index}:{self.mutator}"

    @property
    def command(self) -> str:
        return " ".join(self.argv[:2]) if self.argv[:1] == ("rules",) or self.argv[:1] == (
            "target",) else self.argv[0]


@dataclass
class Result:
    case: Case
    outcome: str
    code: int | None
    stderr: str
    signature: str
    """What groups this result with others of the same cause: the innermost Raptor frame
    of a traceback or hang, or the offending line of an unclean message (numbers elided)."""
    seconds: float
    left_files: bool = False
    """A run that failed before writing results (exit 2, traceback, hang, crash) left files
    in --out."""


# ------------------------------------------------------------------ classification
INTERNALS = [re.compile(p) for p in (
    r"Traceback \(most recent call last\)",
    r"File \"[^\"]+\", line \d+",
    r"panicked at", r"RUST_BACKTRACE", r"pyo3_runtime", r"PanicException",
    r"called `(Option|Result)::unwrap\(\)`", r"\.rs:\d+:\d+",
    r"\.py:\d+: \w*Warning", r"\w+Warning: ",
    r"\[ONNXRuntimeError\]", r"onnxruntime::", r"\[[EW]:onnxruntime",
    r"\b(KeyError|IndexError|AttributeError|TypeError|AssertionError|ZeroDivisionError|"
    r"UnicodeDecodeError|OverflowError|RecursionError|NameError|UnboundLocalError|"
    r"StopIteration|BadZipFile|EOFError|NotImplementedError)\b",
    r"too many values to unpack", r"not enough values to unpack", r"cannot reshape array",
    r"has no attribute", r"unsupported operand type", r"index out of range",
    r"out of bounds for (axis|dimension)", r"'NoneType'", r"is not subscriptable",
    r"object is not iterable", r"invalid literal for int\(\)", r"unhashable type",
    r"positional argument", r"unexpected keyword argument", r"division by zero",
    r"math domain error", r"maximum recursion depth", r"could not convert string to float",
    r"operands could not be broadcast", r"Unable to allocate", r"dtype\(", r"<class '",
    r"object at 0x[0-9a-f]+",
)]
"""Text that only Python, numpy, Rust or onnxruntime internals produce; never in a message
written for a person."""

INTERNAL_ERROR = "raptor: internal error"
DUMP = "\n--- stack dump of the worker ---\n"
"""Separates a hung or crashed case's output from the worker's stack dump in `stderr`."""
OUT_OF_MEMORY = "raptor: out of memory"
_FRAME = re.compile(r'File "([^"]+)", line (\d+),? in (\S+)')
_DIGITS = re.compile(r"\d+")


def _short(path: str) -> str:
    return path[path.rindex("/raptor/") + 1:] if "/raptor/" in path else Path(path).name


def _frame_signature(text: str) -> str:
    """`path:function` of the innermost Raptor frame in a traceback or in the worker's main
    thread of a stack dump, followed by `(in file:function)` when the innermost frame is
    outside Raptor; faulthandler lists the innermost frame first, a traceback last."""
    blocks = re.split(r"(?m)^(?=(?:Current thread|Thread) 0x)", text)
    text = next((b for b in blocks if "_worker_main" in b), text)
    frames = _FRAME.findall(text)
    if "Traceback (most recent call last)" in text:
        frames = frames[::-1]
    if frames and frames[0][0].endswith("/tests/fuzz/harness.py") and \
            frames[0][2] == "_run_in_worker":
        return "gc.collect() after the case (its garbage)"
    frames = [f for f in frames if not f[0].endswith("/tests/fuzz/harness.py")]
    if not frames:
        return "?"
    ours = [f for f in frames if "/raptor/" in f[0]]
    pick = ours[0] if ours else frames[0]
    where = f"{_short(pick[0])}:{pick[2]}"
    if frames[0] is not pick:
        where += f" (in {_short(frames[0][0])}:{frames[0][2]})"
    return where


def _exception_name(text: str) -> str:
    """The exception class of the last `Name: message` line of a traceback."""
    for line in reversed(text.strip().splitlines()):
        m = re.match(r"([\w.]+(?:Error|Exception|Exit|Interrupt|Iteration|Warning)\w*)\b",
                     line.strip())
        if m:
            return m.group(1).rsplit(".", 1)[-1]
    return "Exception"


def _message_signature(line: str) -> str:
    return _DIGITS.sub("N", line.strip())[:100]


_CARET = re.compile(r"\s*\^[\^~]*\s*")
_DIAGNOSTIC = re.compile(r"\S+:\d+:\d+: (error|warning): \S")
"""`file:line:col: error: ...`: several such lines are one message per problem."""


def _messages(stderr: str) -> list[str]:
    """Non-empty lines, without the quoted source line and caret under a compiler-style
    `file:line:col: error: ...` diagnostic."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    keep = []
    for i, ln in enumerate(lines):
        if _CARET.fullmatch(ln):
            continue
        if ln[:1].isspace() and i + 1 < len(lines) and _CARET.fullmatch(lines[i + 1]):
            continue
        keep.append(ln)
    return keep


def unclean_reason(case: Case, code: int, stderr: str) -> str | None:
    """Why the text of a finished run is not a clean message, or None."""
    lines = _messages(stderr)
    for ln in lines:
        if any(p.search(ln) for p in INTERNALS):
            return ln
    if code == 0:
        return None
    if code not in (1, 2):
        return f"exit code {code}"
    errors = [ln for ln in lines if not ln.startswith(("note: ", "warning: "))]
    if not errors:
        return "no message"
    for ln in errors:
        if ln[:1].isspace() or ln.rstrip().endswith(":"):
            return ln  # a heading with continuation lines: a multi-line message
    per_file = case.argv[:1] == ("verify",) or case.argv[:2] == ("rules", "check")
    one_per_problem = all(_DIAGNOSTIC.match(ln) for ln in errors) or all(
        re.match(r"(peft|cpsat): ", ln) for ln in errors)
    if len(errors) > 1 and not (per_file or (code == 1 and one_per_problem)):
        return f"{len(errors)} lines: {errors[0]}"
    return None


def classify(case: Case, code: int | None, stderr: str, escaped: str | None, dump: str,
             status: str) -> tuple[str, str]:
    """(outcome, signature) of one run; `status` is "done", "hang" or "crash"."""
    if status == "hang":
        return "hang", f"hang at {_frame_signature(dump)}"
    if status == "crash":
        return "crash", f"crash at {_frame_signature(dump)}"
    if escaped is not None:
        name = _exception_name(escaped)
        return ("oom" if name.endswith("MemoryError") else "traceback",
                f"{name} at {_frame_signature(escaped)}")
    if OUT_OF_MEMORY in stderr:
        return "oom", f"MemoryError at {_frame_signature(stderr)}"
    if INTERNAL_ERROR in stderr:
        tail = stderr[stderr.index(INTERNAL_ERROR):]
        m = re.search(r"internal error \((\w+)", tail)
        return "traceback", f"{m.group(1) if m else '?'} at {_frame_signature(stderr)}"
    assert code is not None
    reason = unclean_reason(case, code, stderr)
    if reason is not None:
        return "unclean", _message_signature(reason)
    if code == 0:
        if case.invalid is not None:
            return "accepted", f"accepted: {_message_signature(case.invalid)[:60]}"
        return "ok", ""
    first = next((ln for ln in _messages(stderr) if not ln.startswith(("note: ", "warning: "))),
                 "")
    return "error", _message_signature(re.sub(r"^\S*?:(\d+:)*\s*(error: )?", "", first))[:60]


# ------------------------------------------------------------------ the worker
PRELOAD = ["numpy", "onnx", "onnx.checker", "lark", "rich.console", "rich.table",
           "ortools.sat.python.cp_model", "onnxruntime"]
"""Imported once by the fork server, so each worker starts with them. Not egglog: importing
it starts native threads, and a process forked after that hangs in its first e-graph."""


def _run_in_worker(main: Callable[[list[str]], int], argv: list[str], cwd: str,
                   out_path: str, err_path: str) -> tuple[int | None, str | None]:
    """Run `main(argv)` with fds 1 and 2 in files; (exit code, escaped traceback)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    escaped = None
    code: int | None = None
    with open(out_path, "wb") as fo, open(err_path, "wb") as fe:
        os.dup2(fo.fileno(), 1)
        os.dup2(fe.fileno(), 2)
        try:
            os.chdir(cwd)
            code = main(argv)
        except SystemExit as e:
            code = 0 if e.code is None else e.code if isinstance(e.code, int) else 1
        except BaseException:
            escaped = traceback.format_exc()
        finally:
            # the case's own garbage is collected on its clock, not on the next case's
            gc.collect()
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    return code, escaped


def _worker_main(conn: Connection, entry: str, mem_bytes: int, dump_path: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    if mem_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    dump = open(dump_path, "a")  # noqa: SIM115 - open for the worker's lifetime
    faulthandler.enable(dump, all_threads=True)
    faulthandler.register(signal.SIGUSR1, dump, all_threads=True)
    # print() and rich write to sys.stdout / sys.stderr: make them the real fds 1 and 2
    # (under pytest they are capture objects), which each case points at its own files
    sys.stdout = open(1, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
    os.environ.pop("RAPTOR_RULES", None)
    os.environ["RAPTOR_DEBUG"] = "1"  # an internal error comes with its traceback
    module, name = entry.split(":")  # imported before the first case's clock starts
    main = getattr(importlib.import_module(module), name)
    gc.freeze()  # the imports stay out of every later collection
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(_run_in_worker(main, *job))


class _Worker:
    def __init__(self, ctx: multiprocessing.context.BaseContext, entry: str, mem_bytes: int,
                 scratch: Path, slot: int) -> None:
        self.dump_path = scratch / f"worker{slot}.dump"
        self.dump_path.write_text("")
        self.conn, child = ctx.Pipe()  # type: ignore[attr-defined]
        self.proc = ctx.Process(  # type: ignore[attr-defined]
            target=_worker_main, args=(child, entry, mem_bytes, str(self.dump_path)),
            daemon=True)
        self.proc.start()
        child.close()
        self.done = 0
        self.ready = False

    def wait_ready(self) -> None:
        """Block until the worker has imported Raptor (a few seconds)."""
        if not self.ready:
            try:
                ok = self.conn.poll(300) and self.conn.recv() == "ready"
            except (EOFError, OSError):
                ok = False
            if not ok:
                raise RuntimeError("a fuzz worker did not start (see its stderr)")
            self.ready = True

    def kill(self) -> str:
        """Stack dump of the running case, then the worker is killed."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGUSR1)
        time.sleep(0.3)
        self.proc.kill()
        self.proc.join()
        return self.dump_path.read_text(errors="replace")

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(None)
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


# ------------------------------------------------------------------ the pool
@dataclass
class _Running:
    case: Case
    case_dir: Path
    out_dir: Path
    started: float


@dataclass
class FuzzRun:
    """Runs cases on `jobs` workers with a per-case `timeout` and an address-space cap."""

    jobs: int = 1
    timeout: float = 30.0
    mem_mb: int = 2048
    recycle: int = 300
    """Cases per worker before it is replaced (leaks in one case must not fail later ones)."""
    entry: str = "raptor.cli:main"
    """`module:function` the workers call with each case's argv (the harness's own test
    points it elsewhere)."""

    def run(self, cases: Iterable[Case], progress: Callable[[Result], None] | None = None
            ) -> list[Result]:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(PRELOAD)
        results: list[Result] = []
        with tempfile.TemporaryDirectory(prefix="raptor-fuzz-") as tmp:
            scratch = Path(tmp)

            def worker(slot: int) -> _Worker:
                return _Worker(ctx, self.entry, self.mem_mb << 20, scratch, slot)

            workers = [worker(i) for i in range(self.jobs)]
            running: dict[int, _Running] = {}
            todo: Iterator[Case] = iter(cases)
            exhausted = False
            try:
                while True:
                    for slot, w in enumerate(workers):
                        if slot in running or exhausted:
                            continue
                        case = next(todo, None)
                        if case is None:
                            exhausted = True
                            break
                        running[slot] = self._start(w, case, scratch, slot)
                    if not running:
                        break
                    ready = wait([workers[s].conn for s in running] +
                                 [workers[s].proc.sentinel for s in running], timeout=0.2)
                    now = time.monotonic()
                    for slot in list(running):
                        w, job = workers[slot], running[slot]
                        res = None
                        if w.conn in ready or w.proc.sentinel in ready:
                            res = self._collect(w, job)
                        elif now - job.started > self.timeout:
                            res = self._finish(job, None, None, w.kill(), "hang")
                        if res is None:
                            continue
                        del running[slot]
                        results.append(res)
                        if progress is not None:
                            progress(res)
                        w.done += 1
                        if (res.outcome in ("hang", "crash", "oom") or not w.proc.is_alive()
                                or w.done >= self.recycle):
                            if w.proc.is_alive():
                                w.stop()
                            workers[slot] = worker(slot)
            finally:
                for w in workers:
                    w.stop()
        return results

    def _start(self, w: _Worker, case: Case, scratch: Path, slot: int) -> _Running:
        case_dir = scratch / f"case{slot}"
        if case_dir.exists():
            shutil.rmtree(case_dir)
        case_dir.mkdir()
        for rel, data in case.files.items():
            path = case_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        out_dir = case_dir / "out"
        argv = [a.replace("{dir}", str(case_dir)).replace("{out}", str(out_dir))
                for a in case.argv]
        w.wait_ready()
        w.dump_path.write_text("")
        w.conn.send((argv, str(case_dir), str(case_dir / ".stdout"),
                     str(case_dir / ".stderr")))
        return _Running(case, case_dir, out_dir, time.monotonic())

    def _collect(self, w: _Worker, job: _Running) -> Result:
        try:
            code, escaped = w.conn.recv()
        except (EOFError, OSError):
            w.proc.join(timeout=5)
            return self._finish(job, None, None, w.dump_path.read_text(errors="replace"),
                                "crash")
        return self._finish(job, code, escaped, "", "done")

    def _finish(self, job: _Running, code: int | None, escaped: str | None, dump: str,
                status: str) -> Result:
        err_file = job.case_dir / ".stderr"
        stderr = err_file.read_text(errors="replace") if err_file.exists() else ""
        stderr = stderr.replace(str(job.case_dir), "{dir}")
        if status == "crash" and "memory allocation of" in stderr:
            status = "oom"
        outcome, signature = (("oom", "allocation failure in native code") if status == "oom"
                              else classify(job.case, code, stderr, escaped, dump, status))
        left = job.out_dir.exists() and any(job.out_dir.iterdir())
        failed_early = outcome in FAILURES or code == 2
        if dump:
            stderr += DUMP + dump[-3000:]
        res = Result(job.case, outcome, code, stderr[-6000:], signature,
                     time.monotonic() - job.started, left_files=left and failed_early)
        shutil.rmtree(job.case_dir, ignore_errors=True)
        return res


# ------------------------------------------------------------------ summaries
def table(results: Sequence[Result]) -> str:
    """Markdown table: input class × outcome counts, with totals."""
    classes = sorted({r.case.klass for r in results})
    counts = Counter((r.case.klass, r.outcome) for r in results)
    head = "| class | cases | " + " | ".join(OUTCOMES) + " | left files in --out |"
    rows = [head, "|---|---:|" + "---:|" * len(OUTCOMES) + "---:|"]
    for k in [*classes, "total"]:
        sel = [r for r in results if k == "total" or r.case.klass == k]
        cells = [str(sum(counts[(c, o)] for c in classes) if k == "total" else counts[(k, o)])
                 for o in OUTCOMES]
        name = f"**{k}**" if k == "total" else k
        rows.append(f"| {name} | {len(sel)} | " + " | ".join(cells)
                    + f" | {sum(r.left_files for r in sel)} |")
    return "\n".join(rows)


def signatures(results: Sequence[Result], outcomes: Sequence[str]) -> list[
        tuple[str, str, str, int, str]]:
    """(outcome, class, signature, count, example case) for the given outcomes, most
    frequent first."""
    groups: dict[tuple[str, str, str], list[Result]] = {}
    for r in results:
        if r.outcome in outcomes:
            groups.setdefault((r.outcome, r.case.klass, r.signature), []).append(r)
    rows = [(o, k, s, len(rs), rs[0].case.name) for (o, k, s), rs in groups.items()]
    return sorted(rows, key=lambda x: (OUTCOMES.index(x[0]), -x[3], x[1], x[2]))
