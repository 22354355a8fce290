"""Differential testing: random valid networks (`random_nets`) through Raptor, outputs
against onnxruntime's.

Each network runs three commands — `solve --solver peft` (latency), `solve --mode pipeline
--solver pipeline` and `interpret --check` — each twice, in the fuzz suite's forked
workers (`harness.FuzzRun`: per-case timeout, memory cap, fds captured). A worker calls
`run` below: `raptor.cli.main`, then, on exit 0, the written outputs against onnxruntime's
(`expected.npz`, computed when the case was made), reported on one marker line.

Classes, worst first (`CLASSES`):
  silent mismatch   exit 0, outputs differ from onnxruntime's
  internal error    a traceback, crash, out-of-memory, or a message made of Python
                    internals (an internal exception passed off as a user error)
  invalid IR        Raptor's own verifier rejected what a pass produced
  timeout           no answer within the timeout
  nondeterministic  the two runs disagree (class, message or outputs)
  unclean refusal   exit 1/2 without one clean line
  numerics flagged  exit 1: Raptor's own check found its simulation differs
  refused: memory   exit 1: the program does not fit a core's local memory
  refused           exit 1/2 with one clean line (an operator, attribute or limit)
  ok                exit 0, outputs equal onnxruntime's within tolerance
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

from tests.fuzz.harness import (
    INTERNALS,
    Case,
    FuzzRun,
    Result,
    _run_in_worker,
    unclean_reason,
)
from tests.fuzz.harness import classify as harness_classify
from tests.fuzz.random_nets import RandomNet, onnxruntime_outputs, random_net
from tests.fuzz.shrink import shrink

CLASSES = ("silent mismatch", "internal error", "invalid IR", "timeout", "nondeterministic",
           "unclean refusal", "numerics flagged", "refused: memory", "refused", "ok")
FAILING = CLASSES[:6]
"""Classes a campaign must never see."""

COMMANDS: dict[str, tuple[str, ...]] = {
    "latency": ("solve", "model.onnx", "--solver", "peft", "--inputs", "inputs.npz",
                "--out", "{out}"),
    "pipeline": ("solve", "model.onnx", "--mode", "pipeline", "--solver", "pipeline",
                 "--stream", "2", "--inputs", "inputs.npz", "--out", "{out}"),
    "interpret": ("interpret", "model.onnx", "--check", "--inputs", "inputs.npz",
                  "--out", "{dir}/outputs.interpret.npz"),
}
MARKER = "@@diffnets "
RTOL, ATOL = 1e-3, 1e-4
_INTERNAL_TEXT = re.compile(r"zip\(\) argument|argument \d+ is (longer|shorter)|"
                            r"tuple index|list index|must be real number|got an unexpected")


def run(argv: list[str]) -> int:
    """Worker entry: `raptor.cli.main(argv)`; on exit 0, one marker line on stderr with
    the largest error against `expected.npz` (in the case directory, the cwd) and a
    digest of the outputs."""
    from raptor.cli import main

    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    if code != 0:
        return code
    out = Path(argv[argv.index("--out") + 1])
    files = sorted(out.glob("outputs.*.npz")) if out.is_dir() else [out]
    with np.load("expected.npz") as f:
        expected = [np.asarray(f[k]) for k in sorted(f.files, key=lambda k: int(k[1:]))]
    report: dict[str, object] = {"files": len(files)}
    digest = hashlib.sha256()
    worst = 0.0
    ok = bool(files)
    for path in files:
        with np.load(path) as f:
            got = [np.asarray(f[k]) for k in f.files]
        if len(got) != len(expected):
            ok = False
            continue
        for g, e in zip(got, expected, strict=True):
            digest.update(np.ascontiguousarray(g).tobytes())
            if g.shape != e.shape:
                ok = False
                continue
            err = float(np.max(np.abs(g.astype(np.float64) - e), initial=0.0))
            bound = ATOL * max(1.0, float(np.max(np.abs(e), initial=0.0)))
            worst = max(worst, err)
            ok = ok and bool(np.allclose(g, e, rtol=RTOL, atol=bound))
    report.update(ok=ok, max_err=worst, digest=digest.hexdigest()[:16])
    sys.stderr.write(MARKER + json.dumps(report) + "\n")
    return 0


@dataclass(frozen=True)
class Outcome:
    net: int
    command: str
    klass: str
    detail: str
    """The first message line (numbers kept) or the error against onnxruntime."""
    digest: str
    seconds: float


def make_cases(nets: Iterable[RandomNet], commands: Sequence[str] = tuple(COMMANDS),
               repeat: int = 2) -> list[Case]:
    """Every network under every command, `repeat` times each (adjacent, so a rerun runs
    on the other worker when there are two)."""
    cases = []
    for net in nets:
        buf = io.BytesIO()
        np.savez(buf, **net.inputs)  # type: ignore[arg-type]
        exp = io.BytesIO()
        np.savez(exp, **{f"y{i}": e for i, e in enumerate(net.expected)})  # type: ignore[arg-type]
        files = {"model.onnx": net.model.SerializeToString(), "inputs.npz": buf.getvalue(),
                 "expected.npz": exp.getvalue()}
        for cmd in commands:
            for _ in range(repeat):
                cases.append(Case(cmd, ",".join(sorted(net.ops)), net.seed, files,
                                  COMMANDS[cmd]))
    return cases


def classify(res: Result) -> tuple[str, str, str]:
    """(class, detail, digest) of one run."""
    lines = res.stderr.splitlines()
    marker = next((ln[len(MARKER):] for ln in lines if ln.startswith(MARKER)), None)
    stderr = "\n".join(ln for ln in lines if not ln.startswith(MARKER))
    if res.outcome == "hang":
        return "timeout", res.signature, ""
    if res.outcome in ("crash", "oom", "traceback"):
        return "internal error", res.signature, ""
    messages = [ln for ln in stderr.splitlines() if ln.strip()
                and not ln.startswith(("note: ", "warning: ", "  "))]
    first = messages[0] if messages else ""
    if res.code == 0:
        if marker is None:
            return "internal error", "exit 0 without outputs", ""
        m = json.loads(marker)
        if not m["ok"]:
            return "silent mismatch", f"max error {m['max_err']:.3g}", m["digest"]
        return "ok", f"max error {m['max_err']:.1e}", m["digest"]
    if any(p.search(stderr) for p in INTERNALS) or _INTERNAL_TEXT.search(stderr):
        return "internal error", first, ""
    if "invalid schedule" in stderr or re.search(r"\[[A-Z]+-\d+\]", stderr):
        return "invalid IR", first, ""
    if unclean_reason(res.case, res.code or 0, stderr) is not None:
        return "unclean refusal", first, ""
    if "differ from the" in stderr:
        return "numerics flagged", first, ""
    if "local memory" in stderr:
        return "refused: memory", first, ""
    return "refused", first, ""


def outcomes(results: Sequence[Result]) -> list[Outcome]:
    """One outcome per (network, command): the first run's class, or "nondeterministic"
    when the reruns disagree in class, message or outputs."""
    runs: dict[tuple[int, str], list[tuple[str, str, str, float]]] = {}
    for r in results:
        runs.setdefault((r.case.index, r.case.klass), []).append((*classify(r), r.seconds))
    out = []
    for (net, cmd), got in sorted(runs.items()):
        klass, detail, digest, secs = got[0]
        same = {(k, d if k != "ok" else "", g) for k, d, g, _ in got}
        if len(same) > 1:
            klass, detail = "nondeterministic", " | ".join(sorted(f"{k}: {d}" for k, d, _ in
                                                                   same))
        out.append(Outcome(net, cmd, klass, detail, digest, secs))
    return out


def run_nets(seeds: Iterable[int], jobs: int = 2, timeout: float = 120.0,
             commands: Sequence[str] = tuple(COMMANDS), repeat: int = 2,
             progress: bool = False) -> tuple[list[RandomNet], list[Outcome]]:
    nets = [random_net(s) for s in seeds]
    cases = make_cases(nets, commands, repeat)
    done = [0]

    def tick(r: Result) -> None:
        done[0] += 1
        if progress and done[0] % 50 == 0:
            print(f"  {done[0]}/{len(cases)} runs", file=sys.stderr, flush=True)

    results = FuzzRun(jobs=jobs, timeout=timeout, entry="tests.fuzz.diffnets:run").run(
        cases, tick)
    return nets, outcomes(results)


def rerun_differences(outs: Sequence[Outcome], earlier: Sequence[Outcome]) -> list[str]:
    """Where a campaign disagrees with an earlier one on the same (network, command): the
    class, the message (ok's error aside) or the outputs' digest."""
    before = {(o.net, o.command): o for o in earlier}
    diffs = []
    for o in outs:
        e = before.get((o.net, o.command))
        if e is None:
            continue
        if (o.klass, o.detail if o.klass != "ok" else "", o.digest) != (
                e.klass, e.detail if e.klass != "ok" else "", e.digest):
            diffs.append(f"net {o.net} {o.command}: {e.klass} ({e.detail}, {e.digest}) then "
                         f"{o.klass} ({o.detail}, {o.digest})")
    return diffs


def class_table(outs: Sequence[Outcome]) -> str:
    """Markdown: command x class counts."""
    cmds = sorted({o.command for o in outs}, key=list(COMMANDS).index)
    seen = [c for c in CLASSES if any(o.klass == c for o in outs)]
    rows = ["| command | nets | " + " | ".join(seen) + " |",
            "|---|---:|" + "---:|" * len(seen)]
    for cmd in [*cmds, "total"]:
        sel = [o for o in outs if cmd == "total" or o.command == cmd]
        cells = [str(sum(1 for o in sel if o.klass == c)) for c in seen]
        name = f"**{cmd}**" if cmd == "total" else f"`{cmd}`"
        rows.append(f"| {name} | {len(sel)} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def op_table(nets: Sequence[RandomNet], outs: Sequence[Outcome]) -> str:
    """Markdown: per ONNX operator, the networks holding it and their classes (a network
    counts under its worst class over the commands)."""
    worst: dict[int, str] = {}
    for o in outs:
        cur = worst.get(o.net)
        if cur is None or CLASSES.index(o.klass) < CLASSES.index(cur):
            worst[o.net] = o.klass
    seen = [c for c in CLASSES if c in worst.values()]
    rows = ["| operator | nets | nodes | " + " | ".join(seen) + " |",
            "|---|---:|---:|" + "---:|" * len(seen)]
    ops = Counter[str]()
    for n in nets:
        ops.update(n.ops)
    for op, nodes in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])):
        holding = [n.seed for n in nets if op in n.ops]
        cells = [str(sum(1 for s in holding if worst.get(s) == c)) for c in seen]
        rows.append(f"| {op} | {len(holding)} | {nodes} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def messages(outs: Sequence[Outcome], klass: str) -> Counter[str]:
    """How often each message (numbers elided) explains outcomes of `klass`."""
    return Counter(re.sub(r"\d+", "N", o.detail)[:120] for o in outs if o.klass == klass)




def run_here(model: onnx.ModelProto, inputs: dict[str, np.ndarray], command: str
             ) -> tuple[str, str]:
    """(class, detail) of one run of `command` on `model` in this process (no timeout:
    for shrinking), outputs against onnxruntime's."""
    names = {i.name for i in model.graph.input}
    feeds = {k: v for k, v in inputs.items() if k in names}
    try:
        expected = onnxruntime_outputs(model, feeds)
    except Exception:
        return "invalid candidate", ""
    case = make_cases([RandomNet(0, model, feeds, expected, Counter())], [command], 1)[0]
    with tempfile.TemporaryDirectory(prefix="raptor-shrink-") as tmp:
        d = Path(tmp)
        for rel, data in case.files.items():
            (d / rel).write_bytes(data)
        argv = [a.replace("{dir}", tmp).replace("{out}", str(d / "out")) for a in case.argv]
        cwd = os.getcwd()
        try:
            code, escaped = _run_in_worker(run, argv, tmp, str(d / ".out"), str(d / ".err"))
        finally:
            os.chdir(cwd)
        stderr = (d / ".err").read_text(errors="replace")
    outcome, signature = harness_classify(case, code, stderr, escaped, "", "done")
    klass, detail, _ = classify(Result(case, outcome, code, stderr, signature, 0.0))
    return klass, detail


def shrink_failure(net: RandomNet, command: str, klass: str, path: Path,
                   budget: int = 150) -> int:
    """Shrink `net` to a minimal model on which `command` still ends in `klass`; writes it
    to `path` (inputs beside it, .npz) and returns its node count."""
    model = shrink(net.model, lambda m: run_here(m, net.inputs, command)[0] == klass, budget)
    names = {i.name for i in model.graph.input}
    onnx.save(model, path)
    feeds = {k: v for k, v in net.inputs.items() if k in names}
    np.savez(path.with_suffix(".npz"), **feeds)  # type: ignore[arg-type]
    return len(model.graph.node)
