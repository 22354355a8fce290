"""Large-neighbourhood search: CP-SAT re-optimizes windows of the best schedule with the rest
fixed, and the communication model (:func:`raptor.solver.comm.replay`, through
``MergeScheduleResult.build``) decides what is kept.

Why. CP-SAT's model of the whole problem has free links (per-link contention needs an
interval per message and link, see :mod:`raptor.solver.cpsat`), so on real networks its
plans replay slower than PEFT's. Here the model only decides a *neighbourhood* and is
**calibrated** on the schedule it improves: every message between two tasks that keep their
cores is charged the delay it had in that schedule's replay (contention, rendezvous and
flow control included), the free-link transfer only where a task may move. The incumbent is
then a solution of the window's model with exactly its replayed makespan, and an
improvement of the model is an improvement of the replay except where new messages meet
others; the replay judges each window's best solution and keeps it when its :func:`score`
is better: a shorter makespan, or the same and earlier task ends. On a chip busy
throughout (ResNet-18 at one MVM unit) a window rarely lowers the makespan alone: the
window's objective adds the free tasks' ends to the makespan (weighted by their number
plus one), and a *plateau* move is kept when the replay confirms it, making room for
later windows; only a shorter makespan is reported as progress.

A neighbourhood is drawn (seeded, :class:`random.Random`) around a task of the incumbent's
critical chain (the tasks, messages and core predecessors that fixed its makespan, read
backwards from the replay): the ``size`` tasks starting nearest to it in time (*window*),
the tasks of its core and the neighbouring cores around it (*cores*), or the lanes of its
layer (*layer*). Those tasks are *free*: a core among their candidates (their own, their
neighbours' and the neighbourhood's cores) and any start. Tasks that end before the first
free task starts keep their replayed times (constants); every other task keeps its core and
gets a start variable, its core's order free where a free task may come, fixed elsewhere.
The size grows when a window is solved to optimality without gain and shrinks when it
times out (adaptive LNS).

Deterministic. Every sub-solve has a deterministic limit and a seed derived from the
iteration; the budget is counted in deterministic units: each sub-solve's own plus
``PYTHON_UNITS_PER_TASK`` per task modelled and per task replayed (building and replaying
in Python), so the same command gives the same schedule, whatever the load.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ortools.sat.python import cp_model

from raptor.solver.comm import Replay, replay
from raptor.solver.evaluate import retime, validate_schedule
from raptor.solver.graph import ComputeGraph
from raptor.solver.mesh import nearest_cores
from raptor.solver.schedule import MergeScheduleResult, core_order
from raptor.solver.watch import SearchReport, search, session, stop_requested
from raptor.target import Target

PYTHON_UNITS_PER_TASK = 1.5e-5
"""Deterministic units charged per task for building a window's model and per task for
replaying a candidate: on this machine, about what CP-SAT's counter advances in the same
wall time (see ``raptor.solver.cpsat.DET_PER_SECOND``)."""

SUB_LIMIT = 0.02
"""Deterministic limit of one window's solve (units)."""

WALL_PER_WINDOW = 10.0
"""Wall-clock safety limit of one window's solve (seconds; far above what ``SUB_LIMIT``
takes, so the deterministic limit decides)."""

MIN_SIZE, MAX_SIZE = 8, 96
"""Bounds of the free tasks per window."""

MAX_CANDIDATES = 12
"""Candidate cores per free task (its own and the nearest of the others)."""

Expr = int | cp_model.LinearExpr
"""A linear expression of the window's model, or a constant."""

KINDS = ("chain", "window", "cores", "layer")


@dataclass
class LnsStats:
    """What the search did: windows solved, kept, and units spent."""

    windows: int = 0
    kept: int = 0
    units: float = 0.0
    proved: int = 0
    """Windows solved to optimality (of their model)."""
    kinds: dict[str, int] = field(default_factory=dict)
    """Improvements kept per neighbourhood kind."""
    plateau: int = 0
    """Of those kept, the moves with the same makespan and a smaller sum of ends."""
    rejected: int = 0
    """Candidates better in their window's model that the replay did not judge better."""
    build_s: float = 0.0
    solve_s: float = 0.0
    replay_s: float = 0.0
    """Wall seconds building windows' models, in CP-SAT, and replaying candidates (a
    profile for reports; the search itself counts deterministic units)."""


def score(rep: Replay) -> tuple[int, int]:
    """What the search minimizes, in this order: the replayed makespan, then the sum of the
    tasks' ends (a plateau move: on a chip busy throughout, most windows cannot lower the
    makespan alone, but can make room for a later one)."""
    return rep.makespan_ns, sum(rep.end)


def critical_chain(graph: ComputeGraph, core_tasks: Sequence[Sequence[int]], rep: Replay
                   ) -> list[int]:
    """The tasks that fixed the replayed makespan, last first: from the task that ends last,
    repeatedly the predecessor whose message (or result, on the same core) arrived exactly
    when the task started, else the task before it on its core."""
    n = graph.num_tasks
    if not n:
        return []
    prev = [-1] * n
    core = [-1] * n
    for p, tasks in enumerate(core_tasks):
        for a, b in itertools.pairwise(tasks):
            prev[b] = a
        for t in tasks:
            core[t] = p
    t = max(range(n), key=lambda t: (rep.end[t], -t))
    chain = [t]
    seen = {t}
    while True:
        s = rep.start[t]
        cause = -1
        for f in graph.reads[t]:
            u = graph.fragments[f].producer
            got = rep.end[u] if core[u] == core[t] else rep.arrival.get((f, core[t]), -1)
            if got == s and u not in seen:
                cause = u
                break
        if cause < 0:
            cause = prev[t]
        if cause < 0 or cause in seen:
            return chain
        chain.append(cause)
        seen.add(cause)
        t = cause


def tie_same(m: cp_model.CpModel, same: cp_model.IntVar, xu: dict[int, cp_model.IntVar],
             xv: dict[int, cp_model.IntVar]) -> None:
    """``same`` ⇔ two tasks with placement literals ``xu``, ``xv`` share a core, as clauses
    (NOTES: ~10× faster than comparing core indices)."""
    for p, lit in xu.items():
        if p in xv:
            m.add_bool_or([same.Not(), lit.Not(), xv[p]])
            m.add_bool_or([lit.Not(), xv[p].Not(), same])
        else:
            m.add_bool_or([same.Not(), lit.Not()])
    for p, lit in xv.items():
        if p not in xu:
            m.add_bool_or([same.Not(), lit.Not()])


class _Window:
    """One neighbourhood's CP-SAT model (module docstring), hinted with the incumbent."""

    def __init__(self, ctx: _Context, free: list[int], cands: dict[int, list[int]]) -> None:
        g, target = ctx.graph, ctx.target
        self.ctx, self.free = ctx, free
        inc, rep = ctx.best, ctx.rep
        core_of = inc.core_of
        n = g.num_tasks
        dur = ctx.dur
        hint = [rep.end[t] - dur[t] for t in range(n)]
        self.hint = hint
        is_free = [False] * n
        for t in free:
            is_free[t] = True
        t0 = min(rep.start[t] for t in free)
        frozen = [False] * n
        for t in g.topo_order:
            frozen[t] = not is_free[t] and rep.end[t] < t0 and all(frozen[u] for u, _ in g.preds[t])
        self.frozen = frozen
        # tasks starting well after the window stay in the incumbent's time: the model
        # charges what follows them as a tail (``_Window.tails``)
        last = max(rep.end[t] for t in free)
        t1 = last + (last - t0)
        self.dropped = [not is_free[t] and rep.start[t] > t1 for t in range(n)]
        live = [t for t in range(n) if not frozen[t] and not self.dropped[t]]
        self.live = live
        m = self.m = cp_model.CpModel()
        ub = rep.makespan_ns
        # frozen cores and stores: what a live task starts after
        core_free = [0] * target.num_cores
        store_free = 0
        for t in range(n):
            if frozen[t]:
                core_free[core_of[t]] = max(core_free[core_of[t]], rep.end[t])
                if g.tasks[t].shared_ns:
                    store_free = max(store_free, rep.end[t])
        self.start: dict[int, cp_model.IntVar] = {}
        for t in live:
            lo = core_free[core_of[t]] if not is_free[t] else 0
            self.start[t] = m.new_int_var(min(lo, hint[t]), ub, f"s{t}")
        self.x: dict[int, dict[int, cp_model.IntVar]] = {
            t: {p: m.new_bool_var(f"x{t}_{p}") for p in cands[t]} for t in free}
        for t in free:
            m.add_exactly_one(self.x[t].values())
        self._same: dict[tuple[int, int], cp_model.IntVar] = {}
        # durations (local reads cost more when their producer shares the core)
        self.end: dict[int, Expr] = {}
        size: dict[int, Expr] = {}
        for t in live:
            expr: Expr = g.tasks[t].cost_ns
            for f, ns in g.local_reads.get(t, []):
                expr = expr + ns * self.colocated(g.fragments[f].producer, t)
            if isinstance(expr, int):
                size[t] = expr
                self.end[t] = self.start[t] + expr
            else:
                most = sum(ns for _, ns in g.local_reads[t])
                var = m.new_int_var(g.tasks[t].cost_ns, g.tasks[t].cost_ns + most, f"d{t}")
                m.add(var == expr)
                size[t] = var
                e = m.new_int_var(0, ub + most, f"e{t}")
                m.add(e == self.start[t] + var)
                self.end[t] = e
        # one task at a time per core: free order where a free task may come
        open_cores = sorted({p for t in free for p in cands[t]})
        per_core: dict[int, list[cp_model.IntervalVar]] = {p: [] for p in open_cores}
        for t in live:
            if is_free[t]:
                for p, lit in self.x[t].items():
                    per_core[p].append(self.interval(t, size[t], lit))
                    if core_free[p]:
                        m.add(self.start[t] >= core_free[p]).only_enforce_if(lit)
            elif core_of[t] in per_core:
                per_core[core_of[t]].append(self.interval(t, size[t], None))
        for ivs in per_core.values():
            if len(ivs) > 1:
                m.add_no_overlap(ivs)
        opened = set(open_cores)
        for p, tasks in enumerate(inc.core_tasks):
            if p in opened:
                continue
            seq = [t for t in tasks if t in self.start and not is_free[t]]
            for a, b in itertools.pairwise(seq):
                m.add(self.start[b] >= self.end[a])
        self.precedence(cands)
        stores = [(t, g.tasks[t].shared_ns) for t in live if g.tasks[t].shared_ns]
        if stores:
            ivs = []
            for t, sh in stores:
                ivs.append(m.new_interval_var(self.end[t] - sh, sh, self.end[t], f"st{t}"))
                if store_free:
                    m.add(self.end[t] - sh >= store_free)
            if len(ivs) > 1:
                m.add_no_overlap(ivs)
        self.capacity(cands)
        self.makespan = m.new_int_var(0, ub, "makespan")
        m.add(self.makespan >= max((rep.end[t] for t in range(n) if frozen[t]), default=0))
        self.tails(inc.core_tasks)
        # the makespan, then the free tasks' ends (a plateau move, module docstring): one ns
        # of the makespan outweighs one ns of every free task's end
        weight = len(free) + 1
        m.minimize(self.makespan * weight + sum(self.end[t] for t in free))
        self.incumbent = ub * weight + sum(rep.end[t] for t in free)
        """The incumbent's objective value in this model."""
        for t in live:
            m.add_hint(self.start[t], hint[t])
        for t in free:
            for p, lit in self.x[t].items():
                m.add_hint(lit, int(p == core_of[t]))
        for (u, v), lit in self._same.items():
            m.add_hint(lit, int(core_of[u] == core_of[v]))

    def interval(self, t: int, size: Expr, lit: cp_model.IntVar | None
                 ) -> cp_model.IntervalVar:
        m = self.m
        if lit is None:
            if isinstance(size, int):
                return m.new_fixed_size_interval_var(self.start[t], size, f"i{t}")
            return m.new_interval_var(self.start[t], size, self.end[t], f"i{t}")
        if isinstance(size, int):
            return m.new_optional_fixed_size_interval_var(self.start[t], size, lit, f"i{t}")
        return m.new_optional_interval_var(self.start[t], size, self.end[t], lit, f"i{t}")

    def colocated(self, u: int, v: int) -> Expr:
        """1 when u and v run on one core: a constant, a placement literal or a clause-tied
        Boolean (both free)."""
        core_of = self.ctx.best.core_of
        xu, xv = self.x.get(u), self.x.get(v)
        if xu is None and xv is None:
            return int(core_of[u] == core_of[v])
        if xu is None:
            assert xv is not None
            return xv.get(core_of[u], 0)
        if xv is None:
            return xu.get(core_of[v], 0)
        key = (u, v)
        same = self._same.get(key)
        if same is None:
            m = self.m
            same = self._same[key] = m.new_bool_var(f"same{u}_{v}")
            tie_same(m, same, xu, xv)
        return same

    def precedence(self, cands: dict[int, list[int]]) -> None:
        """Each edge into a live task: the incumbent's replayed delay between tasks that keep
        their cores, the free-link transfer where one of them may move."""
        ctx, m = self.ctx, self.m
        g, core_of, rep = ctx.graph, ctx.best.core_of, ctx.rep
        for e in g.edges:
            u, v = e.src, e.dst
            if self.frozen[v] or self.dropped[v]:
                continue
            xu, xv = self.x.get(u), self.x.get(v)
            end_u: Expr = rep.end[u] if self.frozen[u] else self.end[u]
            if xu is None and xv is None:
                m.add(self.start[v] >= end_u + ctx.delay(u, v))
            elif xu is None:
                assert xv is not None
                cu = core_of[u]
                m.add(self.start[v] >= end_u + sum(
                    lit * ctx.delay(u, v, cu, p)
                    for p, lit in xv.items()))
            elif xv is None:
                cv = core_of[v]
                m.add(self.start[v] >= end_u + sum(
                    lit * ctx.delay(u, v, p, cv)
                    for p, lit in xu.items()))
            else:
                for p, lu in xu.items():
                    for q, lv in xv.items():
                        d = ctx.delay(u, v, p, q)
                        if d:
                            m.add(self.start[v] >= end_u + d).only_enforce_if([lu, lv])
                m.add(self.start[v] >= end_u)

    def tails(self, core_tasks: Sequence[Sequence[int]]) -> None:
        """The makespan after each live task: its end where nothing live follows, and for
        each dropped successor (by an edge or on its core) the incumbent's time from that
        successor's start to the end."""
        ctx, m = self.ctx, self.m
        g, rep = ctx.graph, ctx.rep
        after: dict[int, list[int]] = {t: [v for v, _ in g.succs[t]] for t in self.start}
        for tasks in core_tasks:
            for a, b in itertools.pairwise(tasks):
                if a in self.start and a not in self.x and self.dropped[b]:
                    after[a].append(b)
        for t, follow in after.items():
            end = self.end[t]
            tail = [v for v in follow if self.dropped[v]]
            if len(tail) == len(follow) or not follow:
                m.add(self.makespan >= end)
            for v in tail:
                rest = rep.makespan_ns - rep.start[v]
                if (t, v) in ctx.largest:
                    m.add(self.makespan >= end + rest + self.delay_expr(t, v))
                else:  # its core's next task
                    m.add(self.makespan >= end + rest)

    def delay_expr(self, u: int, v: int) -> Expr:
        """Delay from u's end to v's data when v keeps its core (module docstring)."""
        ctx = self.ctx
        xu = self.x.get(u)
        if xu is None:
            return ctx.delay(u, v)
        cv = ctx.best.core_of[v]
        return sum(lit * ctx.delay(u, v, p, cv) for p, lit in xu.items())

    def capacity(self, cands: dict[int, list[int]]) -> None:
        """Crossbar room on every core a free task with tiles may move to: the tiles of the
        tasks that stay there are resident; the free tasks' others take what is left."""
        ctx = self.ctx
        g, cap = ctx.graph, ctx.target.crossbars_per_core
        free = set(self.free)
        stay: dict[int, set[int]] = {}
        for t in range(g.num_tasks):
            if t not in free and g.tasks[t].weights:
                stay.setdefault(ctx.best.core_of[t], set()).update(g.tasks[t].weights)
        users: dict[int, dict[int, list[int]]] = {}
        for t in self.free:
            for p in cands[t]:
                for w in g.tasks[t].weights:
                    if w not in stay.get(p, ()):
                        users.setdefault(p, {}).setdefault(w, []).append(t)
        for p, tiles in sorted(users.items()):
            room = cap - len(stay.get(p, ()))
            if len(tiles) <= room:
                continue
            present = []
            for w, ts in sorted(tiles.items()):
                y = self.m.new_bool_var(f"tile{w}_{p}")
                for t in ts:
                    self.m.add_implication(self.x[t][p], y)
                self.m.add_hint(y, int(any(ctx.best.core_of[t] == p for t in ts)))
                present.append(y)
            self.m.add(sum(present) <= room)

    def schedule(self, values: Callable[[cp_model.IntVar], int]) -> tuple[list[int], list[int]]:
        """(core_of, start) of a solution, given a value reader."""
        core_of = list(self.ctx.best.core_of)
        for t, lits in self.x.items():
            core_of[t] = next(p for p, lit in lits.items() if values(lit))
        start = list(self.hint)
        for t, var in self.start.items():
            start[t] = values(var)
        return core_of, start


class _Context:
    """The graph, the incumbent and its replay, and what every window reads of them."""

    def __init__(self, graph: ComputeGraph, target: Target, best: MergeScheduleResult) -> None:
        self.graph, self.target = graph, target
        self.largest = graph.largest_message()
        self.edge_frags: dict[tuple[int, int], list[int]] = {}
        for v, frags in enumerate(graph.reads):
            for f in frags:
                self.edge_frags.setdefault((graph.fragments[f].producer, v), []).append(f)
        self.lanes: dict[int, list[int]] = {}
        for t, task in enumerate(graph.tasks):
            if task.batch >= 0:
                self.lanes.setdefault(task.batch, []).append(t)
        self.adopt(best)

    def adopt(self, best: MergeScheduleResult, rep: Replay | None = None) -> None:
        g = self.graph
        self.best = best
        self.rep = rep or replay(g, self.target, best.core_of, best.core_tasks, best.start_ns)
        self.dur = g.durations(best.core_of)
        self.by_start = sorted(range(g.num_tasks), key=lambda t: (self.rep.start[t], t))
        self.chain = critical_chain(g, best.core_tasks, self.rep)
        self.score = score(self.rep)

    def delay(self, u: int, v: int, p: int | None = None, q: int | None = None) -> int:
        """From u's end to v's data with u on core p and v on q (default: their incumbent
        cores): the free-link transfer plus the wait the message had in the incumbent's
        replay (link contention at the reader's fan-in, the sender's rendezvous), which a
        move keeps; nothing on one core."""
        cu, cv = self.best.core_of[u], self.best.core_of[v]
        p = cu if p is None else p
        q = cv if q is None else q
        if p == q:
            return 0
        return self.target.transfer_ns(self.largest[(u, v)], p, q) + self.wait(u, v)

    def wait(self, u: int, v: int) -> int:
        """The incumbent's wait of the message u -> v beyond its free-link transfer."""
        cu, cv = self.best.core_of[u], self.best.core_of[v]
        if cu == cv:
            return 0
        rep = self.rep
        seen = max((rep.arrival.get((f, cv), 0) for f in self.edge_frags.get((u, v), ())),
                   default=0)
        return max(0, seen - rep.end[u] - self.target.transfer_ns(self.largest[(u, v)], cu, cv))


def _neighbourhood(ctx: _Context, rng: random.Random, size: int
                   ) -> tuple[str, list[int], dict[int, list[int]]]:
    """(kind, free tasks, candidate cores per free task), see the module docstring."""
    g, target, core_of = ctx.graph, ctx.target, ctx.best.core_of
    rep = ctx.rep
    pivot = rng.choice(ctx.chain)
    kind = rng.choice(KINDS)
    s = rep.start[pivot]
    by_time = sorted(ctx.by_start, key=lambda t: (abs(rep.start[t] - s), t))
    near = nearest_cores(target, core_of[pivot], 5)
    if kind == "chain":
        i = ctx.chain.index(pivot)
        segment = ctx.chain[i:i + rng.randint(2, 6)]
        free = list(segment)
        taken = set(free)
        for t in segment:
            b = g.tasks[t].batch
            lanes = ctx.lanes.get(b, []) if b >= 0 else []
            free += [u for u in sorted(lanes, key=lambda u: (abs(rep.start[u] - s), u))
                     if u not in taken][:max(1, size // (2 * len(segment)))]
            taken.update(free)
    elif kind == "cores":
        pool = set(near) | {core_of[u] for u, _ in g.preds[pivot]}
        free = [t for t in by_time if core_of[t] in pool][:size]
    elif kind == "layer" and g.tasks[pivot].batch >= 0:
        lanes = ctx.lanes[g.tasks[pivot].batch]
        free = sorted(lanes, key=lambda t: (abs(rep.start[t] - s), t))[:size]
        taken = set(free)
        free += [t for t in by_time[:size] if t not in taken][:max(0, size // 4)]
    else:
        kind = "window"
        free = by_time[:size]
    if pivot not in free:
        free[-1:] = [pivot]
    free = sorted(set(free))
    shared = {core_of[t] for t in free}
    cands: dict[int, list[int]] = {}
    for t in free:
        c = {core_of[t], *nearest_cores(target, core_of[t], 3 if kind != "chain" else 8)}
        c.update(core_of[u] for u, _ in g.preds[t])
        c.update(core_of[v] for v, _ in g.succs[t])
        if kind == "cores":
            c |= shared & set(near)
        home = core_of[t]
        cands[t] = sorted(sorted(c, key=lambda p: (target.hops(home, p), p))[:MAX_CANDIDATES])
    return kind, free, cands


def _candidate(ctx: _Context, window: _Window, core_of: list[int], start: list[int]
               ) -> tuple[MergeScheduleResult | None, Replay]:
    """A window's solution as a schedule, and its replay; the schedule only when its
    :func:`score` is better than the incumbent's and it is valid. Its times are the solution's
    per-core order timed from the incumbent's plan: the plan's times are the messages'
    priorities and the receives' posting plan, so a task keeps its planned start unless
    pushed, and a free task is planned as much earlier or later than before as the window
    moved it in the replay (ASAP everywhere, the canonical times before, replays
    ResNet-18's PEFT schedule 11.8 µs slower without any move)."""
    g, target, best = ctx.graph, ctx.target, ctx.best
    earliest = list(best.start_ns)
    for t in window.free:
        earliest[t] = max(0, earliest[t] + start[t] - ctx.rep.start[t])
    start = retime(g, target, core_of, core_order(g, target, core_of, start), earliest)
    rep = replay(g, target, core_of, core_order(g, target, core_of, start), start)
    if score(rep) >= ctx.score:
        return None, rep
    cand = MergeScheduleResult.build(g, target, core_of, start, solver="cpsat",
                                     status="FEASIBLE", model="lns")
    return (None if validate_schedule(g, target, cand) else cand), rep


def lns_schedule(graph: ComputeGraph, target: Target, initial: MergeScheduleResult,
                 units: float, seed: int = 0, wall_s: float = float("inf"),
                 on_progress: SearchReport | None = None, bound: int = 0
                 ) -> tuple[MergeScheduleResult, LnsStats]:
    """The best schedule found from ``initial`` within ``units`` deterministic units (and
    ``wall_s`` seconds, a safety limit that only a heavily loaded machine reaches); it stops
    early at a schedule that replays at ``bound`` (a lower bound of the problem) or when a
    window holding every task is solved to optimality without gain."""
    graph.freeze()
    stats = LnsStats()
    if not graph.num_tasks or units <= 0:
        return initial, stats
    t0 = time.perf_counter()
    ctx = _Context(graph, target, initial)
    rng = random.Random(seed)
    size = min(24, graph.num_tasks)
    n = graph.num_tasks
    with session():
        # Ctrl-C (`stop_search`) ends the running window and the search with it
        while stats.units < units and time.perf_counter() - t0 < wall_s \
                and not stop_requested():
            t1 = time.perf_counter()
            kind, free, cands = _neighbourhood(ctx, rng, size)
            window = _Window(ctx, free, cands)
            t2 = time.perf_counter()
            stats.build_s += t2 - t1
            solver = cp_model.CpSolver()
            prm = solver.parameters
            # one worker: a window is small, one thread is deterministic without the interleaved
            # search (which aborted OR-Tools 9.15 on a YOLO-neck window: "Check failed:
            # heuristics.fixed_search != nullptr"), and the other core stays free
            prm.num_workers = 1
            prm.random_seed = seed + stats.windows
            prm.cp_model_probing_level = 0
            prm.symmetry_level = 0
            prm.max_deterministic_time = min(SUB_LIMIT, max(units - stats.units, 1e-3))
            prm.max_time_in_seconds = WALL_PER_WINDOW
            code = search(solver, window.m)
            t3 = time.perf_counter()
            stats.solve_s += t3 - t2
            stats.windows += 1
            stats.units += solver.response_proto.deterministic_time \
                + PYTHON_UNITS_PER_TASK * len(window.live)
            proved = code == cp_model.OPTIMAL
            stats.proved += proved
            improved = False
            # the model's best only: replays cost most of the search on large graphs
            # (ResNet-18: 0.65 s each), so more windows beat more solutions of one
            if code in (cp_model.OPTIMAL, cp_model.FEASIBLE) \
                    and solver.objective_value < window.incumbent:
                stats.units += PYTHON_UNITS_PER_TASK * n
                cand, rep = _candidate(ctx, window, *window.schedule(solver.value))
                if cand is None:
                    stats.rejected += 1
                else:
                    faster = rep.makespan_ns < ctx.rep.makespan_ns
                    ctx.adopt(cand, rep)
                    stats.kept += 1
                    stats.plateau += not faster
                    improved = True
                    if on_progress is not None and faster:
                        on_progress(cand.estimate_ns, None)
            stats.replay_s += time.perf_counter() - t3
            if proved and not improved and len(free) == n:
                break  # the whole schedule's window is optimal: nothing left to find
            if ctx.best.estimate_ns <= bound:
                break  # proven optimal
            if proved and not improved:
                size = min(MAX_SIZE, n, size + max(2, size // 4))
            elif not proved:
                size = max(MIN_SIZE, size * 3 // 4)
            stats.kinds[kind] = stats.kinds.get(kind, 0) + improved
    return ctx.best, stats
