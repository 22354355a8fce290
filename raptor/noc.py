"""The network-on-chip's timing, written once: serialization, routes, cut-through links.

Every user — PEFT's link planner, the communication replay, CP-SAT's coefficients, the
pipeline models, the simulator and the pimsim-nn exporter — prices a message here:

* **Serialization.** A message of ``n`` bytes is ``ceil(n / flit_bytes)`` flits, each
  ``flit_cycles`` on a link (:func:`flits`, :func:`serial_cycles`).
* **Free-link latency.** The head crosses ``hop_cycles`` per hop, the tail follows one
  serialization later (:func:`free_cycles`; ``Target.transfer_ns`` in ns).
* **Routes.** XY routing (along the row, then along the column), or, under the target's
  ``routing = "xy-yx"``, source routing: each message takes its XY or its YX route, chosen
  when it is injected by :meth:`Network.yx_sooner` (the one rule; the communication replay
  applies it, the program records it, the simulator follows it). Directed link
  ``core * 4 + direction`` (:data:`EAST`, :data:`WEST`, :data:`SOUTH`, :data:`NORTH`)
  leaves ``core``; :meth:`Network.links` lists the links that exist, border cores' missing
  ones left out.
* **Cut-through.** The head advances one hop per ``hop_ns`` and waits at a busy link; each
  link is then held for the serialization time (:meth:`Network.cut_through`). A link table
  (:class:`FreeLinks` for time-ordered users, :class:`Timelines` for a list scheduler that
  inserts into idle time) says when a link can be taken.
* **Protocols.** The target's ``protocol`` (:data:`PROTOCOLS`) says how the schedulers price
  a message: ``raptor`` as above, or pimsim-nn's (:func:`message_cycles`,
  :func:`hold_cycles`; a route is then its sender's switch). The simulator's policies of
  each are in ``raptor.sim.protocol``.

Nothing of Raptor's but ``raptor.jit`` (its kernels' decorator) is imported at run time:
``raptor.target`` builds on this module.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from raptor.jit import jitable, kernel

if TYPE_CHECKING:
    from raptor.target import Target

EAST, WEST, SOUTH, NORTH = range(4)

PROTOCOLS = ("raptor", "pimsim-nn")
"""How messages cross the mesh (the target's ``protocol``). ``raptor``: cut-through over XY
links, each held for the serialization. ``pimsim-nn``: a one-flit request and a one-flit
reply before the data, every flit charged the whole path, the sender's switch carrying one
message at a time (no link contention); a route is then that switch alone."""

ROUTINGS = ("xy", "xy-yx")
"""Which routes messages take on Raptor's links (the target's ``routing``): ``xy`` every
message its XY route; ``xy-yx`` each its XY or its YX route, whichever the link table says
arrives sooner when it is injected (`Network.yx_sooner`), recorded in the program (the
send's ``yx``). Mixing the two orders can deadlock a wormhole mesh unless they use separate
virtual channels (O1TURN, Seo et al. 2005); Raptor's cut-through model reserves each link
for a whole message and never holds one while waiting for the next, so it assumes those
channels rather than modelling them."""

N = TypeVar("N", int, "np.ndarray")


def flits(target: Target, nbytes: N) -> N:
    """Flits of a message of ``nbytes`` (an int or an integer array)."""
    return -(-nbytes // target.flit_bytes)


def serial_cycles(target: Target, nbytes: N) -> N:
    """How long a message of ``nbytes`` holds each link of its route, in cycles."""
    return flits(target, nbytes) * target.flit_cycles


def free_cycles(target: Target, hops: N, nbytes: N) -> N:
    """A message's latency over ``hops`` free links, in cycles (head, then the tail)."""
    return hops * target.hop_cycles + serial_cycles(target, nbytes)


def flit_path_cycles(target: Target, hops: N) -> N:
    """One flit over ``hops`` free links (pimsim-nn's NoC table entry for the pair)."""
    return hops * target.hop_cycles + serial_cycles(target, target.flit_bytes)


IR_ELEMENT_BYTES = 4
"""Bytes of an element in the IR (f32, to check numerics): what the schedulers' message
sizes count."""


def activation_bytes(target: Target) -> int:
    """Bytes of one stored activation: the target's `input_bits`, rounded up to bytes. The
    IR computes in f32 to check numerics; the chip stores and moves activations at its own
    precision (pimsim-nn's `setbw`), so that is what occupies local memory."""
    return -(-target.input_bits // 8)


def wire_bytes(target: Target, nbytes: N) -> N:
    """What a message of ``nbytes`` IR bytes carries on pimsim-nn's chip: its elements at
    the chip's activation precision (Raptor's own mesh moves the IR's bytes)."""
    return -(-nbytes // IR_ELEMENT_BYTES) * activation_bytes(target)


def message_cycles(target: Target, hops: N, nbytes: N, protocol: str) -> N:
    """A message of ``nbytes`` IR bytes: its latency when nothing else is in its way, in
    cycles, under ``protocol``: ``raptor``'s :func:`free_cycles`, or pimsim-nn's request,
    reply and data flits (:func:`wire_bytes`), each charged the one-flit latency of the
    whole path."""
    if protocol == "raptor":
        return free_cycles(target, hops, nbytes)
    return (flits(target, wire_bytes(target, nbytes)) + 2) * flit_path_cycles(target, hops)


def hold_cycles(target: Target, hops: N, nbytes: N, protocol: str) -> N:
    """How long a message of ``nbytes`` IR bytes holds what it crosses: each link
    (``raptor``'s serialization) or its sender's switch (pimsim-nn: every data flit over
    the whole path)."""
    if protocol == "raptor":
        return serial_cycles(target, nbytes)
    return flits(target, wire_bytes(target, nbytes)) * flit_path_cycles(target, hops)


def pimsim_read_cycles(target: Target, nbytes: int) -> int:
    """pimsim-nn: a `send` reads its data from local memory (at least 2 cycles)."""
    return max(-(-nbytes // target.local_bytes_per_cycle), 2)


def pimsim_write_cycles(target: Target, nbytes: int) -> int:
    """pimsim-nn: a `recv` writes the data into local memory once the last flit is in."""
    return -(-nbytes // target.local_bytes_per_cycle)


def pimsim_copy_cycles(target: Target, nbytes: int) -> int:
    """pimsim-nn: an `lmv` of ``nbytes`` reads and then writes local memory."""
    return 2 * -(-nbytes // target.local_bytes_per_cycle)


def pimsim_pack_cycles(target: Target, parts: Sequence[int]) -> int:
    """pimsim-nn: a merged message's parts (their bytes) copied one after another into the
    buffer it is sent from (a `tensor.concat`: per part an `lmv`, its gap and the two
    address registers)."""
    return sum(pimsim_copy_cycles(target, n) + PIMSIM_GAP_CYCLES + 2 * PIMSIM_SCALAR_CYCLES
               for n in parts)


PIMSIM_SCALAR_CYCLES = 1
"""pimsim-nn: a scalar instruction (`sldi`: a send's or receive's address register)."""
PIMSIM_GAP_CYCLES = 2
"""pimsim-nn: the cycles after a vector or transfer instruction (`send`, `recv`) before the
next one starts."""

PIMSIM_HANDLER_NS = 1
"""pimsim-nn: the receiver's request handler holds the sender's switch 1 ns after the
request."""


@jitable
def pimsim_request(ready: int, switch_free: int, flit_ns: int) -> tuple[int, int]:
    """pimsim-nn: a send's one-flit request, issued at ``ready`` through its core's switch
    (free from ``switch_free``), reaches the receiver at the first returned time; the
    switch is free again from the second."""
    request = max(ready, switch_free) + flit_ns
    return request, request + PIMSIM_HANDLER_NS


@jitable
def pimsim_transfer(request: int, posted: int, receiver_switch: int, sender_switch: int,
                    back_ns: int, flit_ns: int, read_ns: int, nflits: int
                    ) -> tuple[int, int, int, int]:
    """pimsim-nn's message once its request is in (``request``) and its `recv` is there
    (``posted``): the receiver's one-flit reply (``back_ns``) leaves through its switch
    and reaches the sender at ``reply``; the sender reads its data (``read_ns``) and is
    done at ``done``; its switch then sends from ``start`` ``nflits`` flits of
    ``flit_ns`` each, the last arriving at ``arrival``. Returns (reply, done, start,
    arrival); the receiver's switch is taken until ``reply``, the sender's until
    ``arrival``."""
    reply = max(request, posted, receiver_switch) + back_ns
    done = reply + read_ns
    start = max(done, sender_switch)
    return reply, done, start, start + nflits * flit_ns


def pimsim_message_order(made: Sequence[tuple[int, int, int]]) -> list[int]:
    """pimsim-nn's global message order from when each message was made in a run whose
    receives do not block: ``made[i]`` = (time, sender, place in the sender's program).
    By time; among messages made at one instant, every sender's first before any sender's
    second, and so on, then by sender. Each sender's switch carries one message at a time,
    so the j-th of a burst leaves j transfers later: ranking a whole burst of one core
    before another core's first message keeps that core's receiver blocked behind the
    burst (on mobilenet_block's program the order by (time, sender) took 239,504 ns under
    `raptor.solver.blocking`, this one 124,217). A sender's messages keep their program
    order, so a program walked in this order cannot deadlock when the run was valid."""
    burst: dict[tuple[int, int], int] = {}
    turn = [0] * len(made)
    for i in sorted(range(len(made)), key=lambda i: (made[i][0], made[i][1], made[i][2])):
        key = made[i][:2]
        turn[i] = burst.get(key, 0)
        burst[key] = turn[i] + 1
    return sorted(range(len(made)), key=lambda i: (made[i][0], turn[i], made[i][1], made[i][2]))


def inject_rank(src: int, dst: int, cores: int) -> int:
    """Messages injected at one time take the links from the lowest sender, then the lowest
    receiver, each after every other event of that time: a rule of the chip, not of the
    order a simulation happens to run its cores in (the simulator and the replay of
    `raptor.solver.comm` both grant by it)."""
    return 1 + src * cores + dst


def memory_rank(core: int, cores: int) -> int:
    """The shared memory's arbitration, a rule of the chip like `inject_rank`: requests made
    at one time are served from the lowest core, each after every other event of that time
    (injections included); a request that finds the memory busy asks again when it frees, so
    the requests waiting then are served from the lowest core too. The simulator, the
    replay of `raptor.solver.comm` and the stream estimate all serve by it, not in the order
    either happens to run its cores in. (Served in request order instead, resnet_block's
    stream at four units took 25,600 ns per inference, now 21,124; yolo_neck's 204,800,
    now 124,622.)"""
    return 1 + cores * cores + core


def pimsim_memory_rank(core: int, cores: int) -> int:
    """pimsim-nn's shared-memory arbitration (`memory_rank` is Raptor's): requests made at
    one time are served from the highest core id down, after the cores that run at that
    time (rank 0). The simulator's pimsim-nn protocol and `raptor.solver.blocking` both
    serve by it."""
    return cores - core


@dataclass(frozen=True, slots=True)
class Route:
    """One message's way through the mesh."""

    links: tuple[int, ...]
    """Directed links in order (``core * 4 + direction``)."""
    serial_ns: int
    """How long it holds each link (its serialization)."""
    transfer_ns: int
    """Its latency over free links (``Target.transfer_ns``; 0 on the same core)."""


NO_ROUTE = Route((), 0, 0)


NEVER = 1 << 62
"""A delay no walk reaches (no early stop)."""


class Network:
    """Routes and message timing of a target's mesh (integer ns), cached per pair, under
    ``protocol`` (default: the target's). Under pimsim-nn's a message's route is its
    sender's switch, resource ``4 * cores + sender``."""

    def __init__(self, target: Target, protocol: str | None = None) -> None:
        self.target = target
        self.protocol = target.protocol if protocol is None else protocol
        self.cols = target.mesh_cols
        self.hop_ns = target.ns(target.hop_cycles)
        self.num_links = (4 if self.protocol == "raptor" else 5) * target.num_cores
        """Size of a table indexed by link (border cores' missing links included) or
        switch."""
        self._routes: dict[tuple[int, int, bool], tuple[int, ...]] = {}
        self._messages: dict[tuple[int, int, int, bool], Route] = {}
        self._timing: dict[tuple[int, int], tuple[int, int]] = {}
        self._first: dict[tuple[int, bool], np.ndarray] = {}
        self._next_links: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._kinds: dict[int, int] = {}
        self.by_hops = np.zeros((0, target.mesh_rows + target.mesh_cols - 1, 2), dtype=np.int64)
        """`timing` by message kind (`kind`) and hops: (serialization, free-link latency)."""
        self.switch_base = 4 * target.num_cores
        self.switched = self.protocol != "raptor"
        """A message's route is its sender's switch (pimsim-nn), not its links."""
        self.choosing = target.routing == "xy-yx" and not self.switched
        """Whether a message may take its YX route (`yx_sooner`)."""

    def route(self, src: int, dst: int, yx: bool = False) -> tuple[int, ...]:
        """Directed links from ``src`` to ``dst``: along the row, then along the column (XY),
        or the column first (``yx``). Both are minimal: the same hops, the same free-link
        latency; they differ only when ``src`` and ``dst`` share neither row nor column."""
        got = self._routes.get((src, dst, yx))
        if got is not None:
            return got
        cols = self.cols
        r, c = divmod(src, cols)
        rd, cd = divmod(dst, cols)
        links = []
        for along_row in (False, True) if yx else (True, False):
            while along_row and c != cd:
                links.append((r * cols + c) * 4 + (EAST if cd > c else WEST))
                c += 1 if cd > c else -1
            while not along_row and r != rd:
                links.append((r * cols + c) * 4 + (SOUTH if rd > r else NORTH))
                r += 1 if rd > r else -1
        got = self._routes[(src, dst, yx)] = tuple(links)
        return got

    def yx_sooner(self, src: int, dst: int, ser: int, inject: int,
                  table: FreeLinks | Timelines) -> bool:
        """The choice of route, made once for every user (source routing, the target's
        ``routing = "xy-yx"``): whether a message from ``src`` to ``dst`` holding each link
        ``ser``, about to be injected at ``inject`` on ``table``, arrives strictly sooner
        over its YX route than over its XY one (ties, a single route, free links and
        ``routing = "xy"``: XY). Nothing is reserved."""
        if not self.choosing:
            return False
        xy, yx = self.route(src, dst), self.route(src, dst, True)
        if xy == yx:
            return False
        hop = self.hop_ns
        if isinstance(table, Timelines):
            return bool(yx_sooner_on(table.table, np.array(xy, dtype=np.int64), len(xy),
                                     np.array(yx, dtype=np.int64), len(yx), ser, hop, inject))
        a = table.probe(xy, inject, hop, ser)
        return a > inject + (len(xy) - 1) * hop and table.probe(yx, inject, hop, ser) < a

    def link_ends(self, link: int) -> tuple[int, int]:
        """The (from, to) cores of a directed link."""
        core, d = divmod(link, 4)
        return core, core + (1, -1, self.cols, -self.cols)[d]

    def link(self, a: int, b: int) -> int:
        """The directed link from core ``a`` to its neighbour ``b``."""
        d = b - a
        return a * 4 + (EAST if d == 1 else WEST if d == -1 else SOUTH if d == self.cols
                        else NORTH)

    def links(self) -> list[int]:
        """Every directed link of the mesh, by core then direction."""
        rows, cols = self.target.mesh_rows, self.cols
        out = []
        for a in range(self.target.num_cores):
            r, c = divmod(a, cols)
            for d, (dr, dc) in enumerate(((0, 1), (0, -1), (1, 0), (-1, 0))):
                if 0 <= r + dr < rows and 0 <= c + dc < cols:
                    out.append(a * 4 + d)
        return out

    def timing(self, src: int, dst: int, nbytes: int, yx: bool = False
               ) -> tuple[tuple[int, ...], int, int]:
        """A message's links (its XY route, or YX), serialization and free-link latency,
        without a Route (cached by pair and by hops and flits: sizes vary too much to cache
        per message)."""
        links = self._routes.get((src, dst, yx))
        if links is None:
            links = self.route(src, dst, yx)
        key = (len(links), flits(self.target, nbytes))  # sizes of one flit count time alike
        got = self._timing.get(key)
        if got is None:
            got = self._hop_timing(key, nbytes)
        if self.switched and links:
            links = (self.switch_base + src,)
        return links, got[0], got[1]

    def _hop_timing(self, key: tuple[int, int], nbytes: int) -> tuple[int, int]:
        """`timing`'s serialization and free-link latency of a message of ``nbytes`` over
        ``key[0]`` hops (``key``: hops and flits), cached."""
        got = self._timing.get(key)
        if got is None:
            t, p, hops = self.target, self.protocol, key[0]
            got = self._timing[key] = (t.ns(hold_cycles(t, hops, nbytes, p)),
                                       t.ns(message_cycles(t, hops, nbytes, p)) if hops else 0)
        return got

    def kind(self, nbytes: int) -> int:
        """The row of :attr:`by_hops` for messages of ``nbytes`` (a kernel's `timing`: the
        same cache, by flits)."""
        key = flits(self.target, nbytes)
        got = self._kinds.get(key)
        if got is None:
            row = [self._hop_timing((h, key), nbytes) for h in range(self.by_hops.shape[1])]
            self.by_hops = np.concatenate((self.by_hops, np.array([row], dtype=np.int64)))
            got = self._kinds[key] = len(self.by_hops) - 1
        return got

    def next_links(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For a kernel's routes (`route_into`): the link each core takes first towards
        every core over XY routes, and over YX ones (cores x cores, -1 towards itself:
        `first_links`; a dimension-order route from a core on the way goes on as the
        message's own), and the core each link leads to (`link_ends`)."""
        if self._next_links is None:
            cores = range(self.target.num_cores)
            to = np.array([self.link_ends(link)[1] for link in range(4 * len(cores))],
                          dtype=np.int64)
            self._next_links = (np.array([self.first_links(c) for c in cores]),
                                np.array([self.first_links(c, True) for c in cores]), to)
        return self._next_links

    def first_links(self, src: int, yx: bool = False) -> np.ndarray:
        """The link a message from ``src`` takes first towards every core (-1 towards
        ``src``) on the mesh's links over its XY route, or its YX one (a switched protocol's
        message takes its switch): a head never makes up the time it waits there, so that
        wait is a lower bound of the message's delay to every core behind it. A route's
        first link depends only on which way the destination lies along each axis (both
        orders are dimension orders), so the routes to the neighbours give them all."""
        got = self._first.get((src, yx))
        if got is None:
            cols, rows, cores = self.cols, self.target.mesh_rows, np.arange(self.target.num_cores)
            r, c = divmod(src, cols)
            first = np.full(9, -1, dtype=np.int64)
            for dr, dc in itertools.product((-1, 0, 1), repeat=2):  # the nearest core each way
                if (dr or dc) and 0 <= r + dr < rows and 0 <= c + dc < cols:
                    first[3 * dr + dc + 4] = self.route(src, src + dr * cols + dc, yx)[0]
            way = 3 * np.sign(cores // cols - r) + np.sign(cores % cols - c) + 4
            got = self._first[(src, yx)] = first[way]
        return got

    def message(self, src: int, dst: int, nbytes: int, yx: bool = False) -> Route:
        """A message's route (XY, or YX), serialization and free-link latency (cached per
        message)."""
        key = (src, dst, nbytes, yx)
        got = self._messages.get(key)
        if got is None:
            got = self._messages[key] = Route(*self.timing(src, dst, nbytes, yx))
        return got

    def cut_through(self, route: Route, inject: int, table: FreeLinks | Timelines) -> int:
        """When a message injected at ``inject`` arrives: its head takes each link of the
        route from ``table`` one hop after the previous one (or later, when the link is
        busy). Free links give exactly the route's ``transfer_ns``; waiting for links adds
        the head's delay."""
        return self.pass_links(route.links, route.serial_ns, route.transfer_ns, inject, table)

    def pass_links(self, links: tuple[int, ...], ser: int, transfer: int, inject: int,
                   table: FreeLinks | Timelines, limit: int | None = None) -> int:
        """:meth:`cut_through` of a message given by its parts (no Route object). With a
        ``limit``, a :class:`Timelines` walk that does not commit may stop once the arrival
        is sure to pass it, returning a time past it (a lower bound of the arrival)."""
        hop = self.hop_ns
        if isinstance(table, Timelines):
            return table.arrival(links, ser, transfer, hop, inject, table.commit, limit)
        return table.arrival(links, ser, transfer, hop, inject)


@lru_cache(maxsize=8)
def shared_network(target: Target, protocol: str | None = None) -> Network:
    """One :class:`Network` per (target, protocol) for the schedulers and the replay: its
    routes and timings depend on nothing else, so its caches stay warm from one scheduler
    run (and one solve phase) to the next instead of starting cold each time."""
    return Network(target, protocol)


class LinkLog:
    """The walks a :class:`FreeLinks` table made, kept as cheaply as the walk can write
    them (the simulator's trace asks for every one): per walk its links (the route's own
    tuple), serialization and the head's time at its first link, in flat lists (no object
    per reservation for the collector to scan once a run is over). The head's time on each
    link (:attr:`heads`) is found when first asked, by walking them again in order on a
    fresh table: a walk depends only on the walks before it. :meth:`reservations` lists
    them as (link, start, end)."""

    def __init__(self) -> None:
        self.routes: list[tuple[int, ...]] = []
        self.serial: list[int] = []
        self.starts: list[int] = []
        self.hop = 0
        """The table's hop (every walk of a table takes its network's)."""
        self.table = (0, True)
        """The logged table's link count and contention."""
        self._heads: list[int] = []
        self._walked = 0
        self._listed: list[tuple[int, int, int]] = []

    @property
    def heads(self) -> list[int]:
        """The head's time on each link of each walk, in order."""
        if self._walked != len(self.routes):
            self._heads = heads = []
            table = FreeLinks(*self.table)
            free = table.free
            for links, start, ser in zip(self.routes, self.starts, self.serial, strict=True):
                table.walk(links, start, self.hop, ser)
                # a route takes each link once: the head took it when it frees, less its hold
                heads += [free[link] - ser for link in links]
            self._walked = len(self.routes)
        return self._heads

    def reservations(self) -> list[tuple[int, int, int]]:
        """(link, start, end) of every reservation, in the order they were made."""
        heads = self.heads
        if len(self._listed) != len(heads):
            it = iter(heads)  # each walk takes as many heads as it has links
            self._listed = [(link, h, h + ser)
                            for links, ser in zip(self.routes, self.serial, strict=True)
                            for link, h in zip(links, it, strict=False)]
        return self._listed


class FreeLinks:
    """Links taken in time order: each is free from the end of its last message.
    ``contention=False`` never waits (but still counts busy time); ``log`` records every
    reservation when given."""

    def __init__(self, n: int, contention: bool = True, log: LinkLog | None = None) -> None:
        self.free = [0] * n
        self.busy = [0] * n
        self.contention = contention
        self.log = log
        if log is not None:
            log.table = (n, contention)

    def walk(self, links: tuple[int, ...], head: int, hop: int, ser: int) -> int:
        """The head takes ``links`` in turn, reaching each ``hop`` after it took the
        previous one (the first at ``head``); when it took the last."""
        free, busy, log, contention = self.free, self.busy, self.log, self.contention
        if log is not None:
            log.routes.append(links)
            log.serial.append(ser)
            log.starts.append(head)
            log.hop = hop
        head -= hop
        for link in links:
            head += hop
            if contention and free[link] > head:
                head = free[link]
            free[link] = head + ser
            busy[link] += ser
        return head

    def arrival(self, links: tuple[int, ...], ser: int, transfer: int, hop: int, inject: int
                ) -> int:
        """:meth:`Network.pass_links` on this table (the simulator's hot path: one call per
        message): free links give ``transfer``, waiting for links adds the head's delay."""
        if not links:
            return inject
        return transfer + self.walk(links, inject, hop, ser) - (len(links) - 1) * hop

    def probe(self, links: tuple[int, ...], head: int, hop: int, ser: int) -> int:
        """What :meth:`walk` would return, reserving nothing."""
        free, contention = self.free, self.contention
        head -= hop
        for link in links:
            head += hop
            if contention and free[link] > head:
                head = free[link]
        return head


class Timelines:
    """Busy intervals of ``n`` exclusive resources (links, the shared memory), kept sorted
    and disjoint, so that a list scheduler can reserve them out of time order (insertion,
    as it reserves core time). As a link table it fits messages into idle time,
    reserving them when ``commit``.

    Walked by compiled kernels (`raptor.jit`): PEFT judges a task's messages to a core in
    one call (`raptor.solver.peft`), where walking lists of intervals in Python took ~3 s
    of 100,000 tasks on 16x16. Resource ``r``'s intervals are ``count[r]`` entries of the
    pools ``starts`` and ``ends`` from ``base[r]``, with room for ``room[r]``; a row that
    fills moves to the pools' end with twice the room (the pools double when that is
    full): at 100,000 tasks on 16x16 a link holds 290 intervals on average and up to
    6,900, so rows of one width had 24 times the room used, and doubling them all took
    0.3 s. :attr:`table` is what the kernels take."""

    def __init__(self, n: int) -> None:
        self.starts = np.zeros(8 * n, dtype=np.int64)
        self.ends = np.zeros(8 * n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.base = np.arange(n, dtype=np.int64) * 8
        self.room = np.full(n, 8, dtype=np.int64)
        self.used = np.array([8 * n], dtype=np.int64)
        """How much of the pools the rows take (a row that moves leaves its old place)."""
        self.commit = True

    @property
    def table(self) -> Table:
        """(starts, ends, count, base, room, used): the arrays the kernels take."""
        return self.starts, self.ends, self.count, self.base, self.room, self.used

    def intervals(self, r: int) -> list[tuple[int, int]]:
        """Resource ``r``'s busy intervals, in order."""
        b, n = int(self.base[r]), int(self.count[r])
        return list(zip(self.starts[b:b + n].tolist(), self.ends[b:b + n].tolist(),
                        strict=True))

    def grow(self) -> None:
        """Twice the room in the pools (a kernel that reserves reports them full); the new
        room is left unwritten."""
        for name in ("starts", "ends"):
            pool = getattr(self, name)
            more = np.empty(2 * len(pool), dtype=np.int64)
            more[:len(pool)] = pool
            setattr(self, name, more)

    def fit(self, r: int, t: int, dur: int) -> int:
        """Earliest start >= ``t`` of a free stretch of ``dur`` on resource ``r``."""
        if dur <= 0:
            return t
        return self.arrival((r,), dur, 0, 0, t, False)

    def arrival(self, links: Sequence[int], ser: int, transfer: int, hop: int, inject: int,
                commit: bool, limit: int | None = None) -> int:
        """:meth:`Network.pass_links` on this table: the head takes each link at its first
        free stretch of ``ser`` from one ``hop`` after the previous one (the first from
        ``inject``), reserved when ``commit``. A walk that does not commit stops once the
        head is far enough behind its free-link time for the arrival to pass ``limit``
        (the delay never shrinks on), returning a time past it."""
        if not links:
            return inject
        route = np.array(links, dtype=np.int64)
        late = NEVER if limit is None or commit else limit - transfer - inject
        while True:
            got = walk_arrays(*self.table, route, len(route), ser, transfer, hop, inject,
                              commit and ser > 0, late)
            if got != FULL:
                return got
            self.grow()

    def reserve(self, r: int, s: int, dur: int) -> None:
        """Mark [s, s + dur) busy (it must be free); touching intervals merge."""
        if dur > 0:
            while walk_arrays(*self.table, np.array([r], dtype=np.int64), 1, dur, 0, 0, s, True,
                              NEVER) == FULL:
                self.grow()


Table = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""`Timelines.table`: (starts, ends, count, base, room, used)."""


@kernel
def has_room(table: Table, r: int, more: int) -> bool:
    """Whether resource ``r`` of `Timelines` ``table`` has room for ``more`` intervals,
    moving its row to the pools' end with twice what it needs if not; false (nothing
    moved) when the pools cannot hold that."""
    starts, ends, count, base, room, used = table
    n = count[r]
    if n + more <= room[r]:
        return True
    wide = 2 * (n + more)
    at = used[0]
    if at + wide > len(starts):
        return False
    b = base[r]
    starts[at:at + n] = starts[b:b + n]
    ends[at:at + n] = ends[b:b + n]
    base[r], room[r], used[0] = at, wide, at + wide
    return True


@kernel
def route_into(next_link: np.ndarray, link_to: np.ndarray, src: int, dst: int,
               out: np.ndarray) -> int:
    """The links from ``src`` to ``dst`` into ``out`` (`Network.next_links`' tables, XY or
    YX), and how many."""
    n = 0
    while src != dst:
        link = next_link[src, dst]
        out[n] = link
        n += 1
        src = link_to[link]
    return n


@kernel
def yx_sooner_on(table: Table, xy: np.ndarray, nxy: int, yx: np.ndarray, nyx: int, ser: int,
                 hop: int, inject: int) -> bool:
    """`Network.yx_sooner` on a `Timelines` table, given the two routes (their first ``nxy``
    and ``nyx`` links): YX when it arrives strictly sooner (a single route: XY)."""
    if nxy == nyx and (xy[:nxy] == yx[:nyx]).all():
        return False
    a = walk(table, xy, nxy, ser, 0, hop, inject, False, NEVER)
    return a > inject and walk(table, yx, nyx, ser, 0, hop, inject, False, a - inject) < a


FULL = -1
"""What `walk` returns when the pools lack room for what it would reserve (times are never
negative)."""


@kernel
def walk(table: Table, route: np.ndarray, n: int, ser: int, transfer: int, hop: int,
         inject: int, commit: bool, late: int) -> int:
    """`Timelines.arrival` on its table, over the first ``n`` links of ``route``: the
    arrival, or past ``late`` ns of delay (``commit`` false) a time past the limit, or
    `FULL` (nothing reserved) when the pools lack room."""
    starts, ends, count, base = table[:4]
    if commit:
        for k in range(n):
            if not has_room(table, route[k], 1):
                return FULL
    head = inject - hop
    delay = 0  # how far head is behind its free-link time (it grows only at a clash)
    for k in range(n):
        link = route[k]
        head += hop
        m, b = count[link], base[link]
        i = m
        if m and ends[b + m - 1] > head:  # the link is busy at some point after head
            i = np.searchsorted(ends[b:b + m], head, side="right")
            free = head
            # ends are sorted and past head from i on: a clash moves head to that end
            while i < m and starts[b + i] < head + ser:
                head = ends[b + i]
                i += 1
            delay += head - free
            if delay > late:
                return transfer + inject + delay
        if commit:  # (i is where head goes: every end before it is at most head)
            count[link] = _put(starts[b:b + m + 1], ends[b:b + m + 1], m, i, head, head + ser)
    return transfer + head - (n - 1) * hop


@kernel
def walk_arrays(starts: np.ndarray, ends: np.ndarray, count: np.ndarray, base: np.ndarray,
                room: np.ndarray, used: np.ndarray, route: np.ndarray, n: int, ser: int,
                transfer: int, hop: int, inject: int, commit: bool, late: int) -> int:
    """`walk` given the table's arrays one by one: numba types a tuple of arrays
    argument by argument in Python, 2-3 us a call, where six arrays take 0.3 us."""
    return walk((starts, ends, count, base, room, used), route, n, ser, transfer, hop,
                inject, commit, late)


@kernel
def _put(starts: np.ndarray, ends: np.ndarray, n: int, i: int, s: int, e: int) -> int:
    """Mark [s, e) busy in one resource's ``n`` intervals, ``i`` the number of them ending
    by ``s`` (it must be free; a row with room for one more); touching intervals merge.
    Returns the new count."""
    if i and ends[i - 1] == s:
        if i < n and starts[i] == e:
            ends[i - 1] = ends[i]
            starts[i:n - 1] = starts[i + 1:n].copy()
            ends[i:n - 1] = ends[i + 1:n].copy()
            return n - 1
        ends[i - 1] = e
        return n
    if i < n and starts[i] == e:
        starts[i] = s
        return n
    starts[i + 1:n + 1] = starts[i:n].copy()
    ends[i + 1:n + 1] = ends[i:n].copy()
    starts[i], ends[i] = s, e
    return n + 1
