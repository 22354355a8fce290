"""The static half of the replay's flow control (`raptor.solver.comm`): what each core
receives, when its readers and senders are planned, and the local memory its tasks need
anyway, task by task, against the budget its posts may fill.

The flow control (`comm._FlowControl`, a subclass) posts receives and holds sends at run
time; this plan says where a post fits (:meth:`ReceivePlan.room`) so that a post never
takes what a later task must have.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

from raptor.solver.graph import ComputeGraph, IntArray
from raptor.target import Target

if TYPE_CHECKING:
    from raptor.solver.comm import _Replayer

Message = tuple[int, int]
"""(fragment, destination core)."""

T = TypeVar("T")


def split(values: list[T], counts: IntArray) -> list[list[T]]:
    """``values`` cut into consecutive runs of ``counts`` each."""
    ends = np.cumsum(counts).tolist()
    return [values[a:b] for a, b in zip([0, *ends], ends, strict=False)]


class Crossings(NamedTuple):
    """The reads whose fragment comes from another core, in task order (each task's reads in
    its order): reader, fragment and the reader's core; the same reads grouped by message
    (fragment, destination core); and, per fragment, its producer and the producer's core.
    The replay's set-up (`raptor.solver.comm.send_order`, the receive plan) works on these
    arrays instead of one Python step per read."""

    task: IntArray
    frag: IntArray
    core: IntArray
    by_message: IntArray
    """The reads in the order of their messages (task order within one)."""
    head: IntArray
    """Where each message's reads begin in ``by_message``."""
    producer: IntArray
    frag_core: IntArray
    keys: list[Message]
    """Each message's (fragment, destination core), in :meth:`messages` order: one tuple per
    message, which every table of the replay shares (the collector has fewer to scan)."""

    @classmethod
    def of(cls, graph: ComputeGraph, core_of: Sequence[int]) -> Crossings:
        """The crossings of ``graph``'s reads under the placement ``core_of``."""
        task, frag, producer, _ = graph.read_arrays()
        cores = np.asarray(core_of, dtype=np.int64)
        frag_core = cores[producer]
        core = cores[task]
        far = frag_core[frag] != core
        task, frag, core = task[far], frag[far], core[far]
        key = frag * (int(cores.max(initial=0)) + 1) + core
        by_message = np.argsort(key, kind="stable")
        key = key[by_message]
        new = np.ones(len(key), dtype=bool)
        new[1:] = key[1:] != key[:-1]
        head = np.flatnonzero(new)
        first = by_message[head]
        return cls(task, frag, core, by_message, head, producer, frag_core,
                   list(zip(frag[first].tolist(), core[first].tolist(), strict=True)))

    def messages(self) -> tuple[IntArray, IntArray]:
        """Each message's fragment and destination core (by fragment, then core)."""
        first = self.by_message[self.head]
        return self.frag[first], self.core[first]

    def least(self, values: IntArray) -> IntArray:
        """Per message, the least of ``values`` (one per read) over its reads."""
        return self.per_message(np.minimum, values)

    def most(self, values: IntArray) -> IntArray:
        """Per message, the greatest of ``values`` (one per read) over its reads."""
        return self.per_message(np.maximum, values)

    def per_message(self, op: np.ufunc, values: IntArray) -> IntArray:
        """``op`` reduced over each message's reads of ``values`` (one per read)."""
        if not len(self.head):  # reduceat wants at least one group
            return values[:0]
        out: IntArray = op.reduceat(values[self.by_message], self.head)
        return out


MEMORY_MARGIN = 0.88
"""Share of a core's local memory the posting policy plans to fill: the allocator's
addresses need some room beyond the bytes live at once (on ResNet-18 the footprint is up
to a tenth above the live peak; at 0.92 one core of 64 came out 128 bytes over, at 0.88
none, for an estimate 2 % longer)."""


class ReceivePlan:
    """Per core: its receives (first and last reader, planned reader and send times, the
    orders to post them in, how early a post must be) and its memory (budget, bytes held
    while each task runs and at each point when every receive is posted just before its
    first reader)."""

    r: _Replayer

    def _plan_receives(self) -> tuple[list[int], dict[Message, int]]:
        """What each core receives: its first and last reader's position, the planned times
        of its reader and its send, the orders to post in, and how early a post must be.
        Returns each task's position on its core and each receive's last reader position.
        Without a :class:`raptor.solver.graph.MemoryDemand` only the order to post in is
        made (every receive is posted at the start; nothing reads the rest)."""
        r = self.r
        crossing, P = r.crossing, r.P
        pos = np.zeros(r.g.num_tasks, dtype=np.int64)
        pos[np.fromiter(itertools.chain.from_iterable(r.progs), np.int64)] = np.fromiter(
            itertools.chain.from_iterable(map(range, map(len, r.progs))), np.int64)
        self._remote_reads()
        at = pos[crossing.task]
        f, q = crossing.messages()
        n = r.g.num_tasks
        priority = np.asarray(r.priority, dtype=np.int64)
        send_plan = priority[crossing.producer] + np.asarray(r.dur, dtype=np.int64)[
            crossing.producer]
        # the first reader's planned start (the readers of one message are on one core:
        # their positions differ, so the least position * n + task names the first)
        reader_plan = priority[crossing.least(at * n + crossing.task) % n]
        plan = np.lexsort((q, f, send_plan[f], reader_plan))
        plan = plan[np.argsort(q[plan], kind="stable")]
        keys = crossing.keys
        self.pending = split([keys[i] for i in plan.tolist()], np.bincount(q, minlength=P))
        """Per core, the receives not yet posted in the order of their readers (planned
        times, then planned sends)."""
        self.early: list[list[Message]] = [[] for _ in range(P)]
        """Per core, the receives not yet posted in the order of their planned sends (with a
        memory plan only)."""
        self.first: dict[Message, int] = {}
        self.reader_plan: dict[Message, int] = {}
        self.send_plan: list[int] = []
        """Per fragment, when its producer is planned to send it."""
        if r.g.memory is None:
            return [], {}
        self.first = dict(zip(keys, crossing.least(at).tolist(), strict=True))
        self.reader_plan = dict(zip(keys, reader_plan.tolist(), strict=True))
        self.send_plan = send_plan.tolist()
        return pos.tolist(), dict(zip(keys, crossing.most(at).tolist(), strict=True))

    def _remote_reads(self) -> None:
        """Per task, the fragments it reads from other cores (`remote`)."""
        r = self.r
        self.remote = split(r.crossing.frag.tolist(),
                            np.bincount(r.crossing.task, minlength=r.g.num_tasks))

    def _plan_memory(self, target: Target, budget: Sequence[int] | None, pos: list[int],
                     last: dict[Message, int]) -> None:
        """Each core's budget and the bytes its tasks need anyway, task by task; which cores
        can post every receive at the start."""
        r = self.r
        n, P = r.g.num_tasks, r.P
        self.mem = r.g.memory
        self.cap = [int(target.local_memory_bytes * MEMORY_MARGIN)] * P if budget is None \
            else list(budget)
        """Per core, the bytes the policy plans to fill."""
        self.usage: list[np.ndarray] = []
        """Per core and task position, the bytes held while that task runs."""
        self.at_point: list[np.ndarray] = []
        """Per core and task position, the bytes held at the point before that task (the
        last entry: the point after the last task)."""
        self.held_bytes: list[np.ndarray] = []
        """Per core, ``usage`` (padded) over ``at_point``: the two as views of one (2 × tasks
        + 1) array, so that a post adds to both and :meth:`room` reads both in one call."""
        self.kept_until = [-1] * n
        self.needed = [0] * P
        self.roomy = [True] * P
        """Cores where every receive fits when posted at the start."""
        self.lead: dict[Message, int] = {}
        """How long before its reader a receive must be posted so that a sender holding the
        message can still deliver it: its task's time and the transfer's (only a core whose
        receives do not all fit at the start needs it)."""
        if self.mem is None:
            return
        for m in sorted(self.first, key=lambda m: (self.send_plan[m[0]], self.reader_plan[m],
                                                   *m)):
            self.early[m[1]].append(m)
        frags, timing = r.g.fragments, r.net.timing
        for m in self.first:
            u = frags[m[0]].producer
            self.lead[m] = r.dur[u] + timing(r.core_of[u], m[1], frags[m[0]].bytes)[2]
        self.held_bytes = self.static_usage(pos, self.first, last)
        self.usage = [both[0, :-1] for both in self.held_bytes]
        self.at_point = [both[1] for both in self.held_bytes]
        for q, both in enumerate(self.held_bytes):
            # what the tasks need anyway may exceed the budget (a task larger than the
            # memory): posting may then fill up to that, no peak grows by it (the padding
            # holds the constants, which every task and point holds too)
            self.needed[q] = int(both.max())
            self.cap[q] = max(self.cap[q], self.needed[q])
            self.roomy[q] = self._fits_at_start(q)

    def _fits_at_start(self, q: int) -> bool:
        """Whether core `q` stays within its budget with every receive posted at the start."""
        assert self.mem is not None
        use = self.usage[q]
        early = [0] * (len(use) + 1)
        fragment = self.mem.fragment
        for key in self.pending[q]:
            early[0] += fragment[key[0]]
            early[self.first[key]] -= fragment[key[0]]
        ahead = np.cumsum(early)
        return not len(use) or int((self.held_bytes[q] + ahead).max()) <= self.cap[q]

    def static_usage(self, pos: list[int], first: dict[Message, int], last: dict[Message, int]
                     ) -> list[np.ndarray]:
        """Per core, the bytes held while each task runs (row 0, one entry per task and an
        unused last one) and at the point before it (row 1, the last entry: the point after
        the last task) when every receive is posted just before its first reader and every
        send is made at once: the task's own buffers (while it runs), the results of earlier
        tasks still to be read there or sent (at the point after them), received fragments
        between their first and last reader, and the constants the core reads."""
        r = self.r
        mem = self.mem
        assert mem is not None
        g, core_of = r.g, r.core_of
        kept = self.kept_until
        frags = g.fragments
        for t, fs in enumerate(g.reads):
            for f in fs:
                u = frags[f].producer
                if core_of[u] == core_of[t] and pos[t] > kept[u]:
                    kept[u] = pos[t]
        # what is held over a range of positions, while tasks run and at points alike:
        # results kept for later readers on their core, received fragments
        ranges = [[0] * (len(prog) + 2) for prog in r.progs]
        for u, upto in enumerate(kept):
            if upto > pos[u]:
                d = ranges[core_of[u]]
                d[pos[u] + 1] += mem.output[u]
                d[upto + 1] -= mem.output[u]
        for (f, q), lo in first.items():
            d = ranges[q]
            d[lo] += mem.fragment[f]
            d[last[(f, q)] + 1] -= mem.fragment[f]
        out = []
        for q, prog in enumerate(r.progs):
            use = [mem.scratch[t] for t in prog]
            use.append(0)
            point = [0] * (len(prog) + 1)
            resident: set[int] = set()
            for i, t in enumerate(prog):
                if kept[t] <= i:  # sent at the point after it, then freed
                    point[i + 1] += mem.output[t]
                if mem.constants:
                    resident.update(mem.constants[t])
            const = sum(mem.constant[c] for c in resident)
            both = np.array([use, point], dtype=np.int64)
            both += np.cumsum(ranges[q][:-1])
            both += const
            out.append(both)
        return out

    def room(self, key: Message, k: int | None = None) -> int:
        """How far over its budget core key[1] would go posting ``key`` at position ``k``
        (default: where it stands) until the fragment's first reader."""
        r = self.r
        if self.mem is None:
            return 0
        f, q = key
        k = r.pc[q] if k is None else k
        lo = self.first[key]
        if lo <= k:
            return 0
        return int(np.maximum.reduce(self.held_bytes[q][:, k:lo], axis=None)) \
            + self.mem.fragment[f] - self.cap[q]

