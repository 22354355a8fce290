"""The static half of the replay's flow control (`raptor.solver.comm`): what each core
receives, when its readers and senders are planned, and the local memory its tasks need
anyway, task by task, against the budget its posts may fill.

The flow control (`comm._FlowControl`, a subclass) posts receives and holds sends at run
time; this plan says where a post fits (:meth:`ReceivePlan.room`) so that a post never
takes what a later task must have.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from raptor.target import Target

if TYPE_CHECKING:
    from raptor.solver.comm import _Replayer

Message = tuple[int, int]
"""(fragment, destination core)."""

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
        Returns each task's position on its core and each receive's last reader position."""
        r = self.r
        graph, core_of, priority, dur = r.g, r.core_of, r.priority, r.dur
        n, P = graph.num_tasks, r.P
        pos = [0] * n
        for prog in r.progs:
            for i, t in enumerate(prog):
                pos[t] = i
        self._remote_reads()
        first: dict[Message, int] = {}
        last: dict[Message, int] = {}
        reader_plan: dict[Message, int] = {}
        for t, fs in enumerate(self.remote):
            if not fs:
                continue
            q, i = core_of[t], pos[t]
            for f in fs:
                key = (f, q)
                was = first.get(key)
                if was is None or i < was:
                    first[key] = i
                    reader_plan[key] = priority[t]
                if was is None or i > last[key]:
                    last[key] = i
        self.first, self.reader_plan = first, reader_plan
        self.send_plan = [priority[frag.producer] + dur[frag.producer]
                          for frag in graph.fragments]
        """Per fragment, when its producer is planned to send it."""
        self.pending: list[list[int]] = [[] for _ in range(P)]
        """Per core, the receives not yet posted in the order of their readers."""
        self.early: list[list[int]] = [[] for _ in range(P)]
        """Per core, the receives not yet posted in the order of their planned sends (with a
        memory plan only)."""
        send_plan = self.send_plan
        plans = [(reader_plan[m], send_plan[m[0]], m) for m in first]
        plans.sort()
        for _, _, (f, q) in plans:
            self.pending[q].append(f)
        return pos, last

    def _remote_reads(self) -> None:
        """Per task, the fragments it reads from other cores (`remote`)."""
        r = self.r
        frag_core = r.frag_core
        self.remote = [[f for f in fs if frag_core[f] != q]
                       for q, fs in zip(r.core_of, r.g.reads, strict=True)]

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
        for (f, q) in sorted(self.first, key=lambda m: (self.send_plan[m[0]], self.reader_plan[m],
                                                        *m)):
            self.early[q].append(f)
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
        for f in self.pending[q]:
            early[0] += fragment[f]
            early[self.first[(f, q)]] -= fragment[f]
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

