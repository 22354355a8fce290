"""pimsim-nn's blocking order of a core's sends and receives.

Raptor's materialization posts each receive early (at the start of its core's program, or
where the memory-aware flow control lets it fit): in Raptor's simulator posting never blocks
(the consumer waits for the data). pimsim-nn's `recv` blocks the core until the data is
written, so the same order could leave two cores each waiting in a receive for the other.

The blocking order performs every core's sends and receives in one global message order,
each receive as late as that allows (just before the first op that reads it, or before a
send or receive later in the order). The order is the channel numbers, which follow the
producers' planned ends, or a `rank` of the messages (`message_rank`: by when they leave in
a run where receives do not block). Either way a compute never needs a receive ranked above
a send that follows it; with every core walking the messages in one global order, the lowest
unfinished message always has its sender and its receiver on their way to it, and the
program cannot deadlock; the exporter's validator replays it to check.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from raptor import noc
from raptor.ir.core import Block, Operation
from raptor.ir.module import Module
from raptor.ir.ops import ChannelReceiveOp, ChannelSendOp, CoreOp, StreamOp

Rank = Mapping[int, int]
"""Channel -> its message's place in the global order (distinct integers)."""


class PostedRank(dict[int, int]):
    """A message order for a program scheduled under pimsim-nn's protocol: besides before
    its first reader or a send later in the order, each receive goes as soon as the
    program reaches where it is posted and no send earlier in the order is still to come
    (materialization posts it where its sender will be,
    `raptor.solver.blocking.meeting_posts`; the estimate's `blocking.programs` places it
    by the same rule)."""


def channel_rank(module: Module) -> PostedRank:
    """The channel order as a `PostedRank`."""
    return PostedRank({op.channel: op.channel for body in _programs(module)
                       for op in body.ops if isinstance(op, ChannelSendOp)})


def blocking_order(ops: list[Operation], rank: Rank | None = None) -> list[Operation]:
    """`ops` of one core program with each receive moved to its place in the message order
    (channel order without a `rank`)."""
    key = (lambda ch: ch) if rank is None else rank.__getitem__
    receives = sorted((op for op in ops if isinstance(op, ChannelReceiveOp)),
                      key=lambda op: key(op.channel))
    channel_of = {op.result: key(op.channel) for op in receives}
    posted = isinstance(rank, PostedRank)
    later = [1 << 62] * (len(ops) + 1)  # the place of the next send from each op on
    for j in range(len(ops) - 1, -1, -1):
        op = ops[j]
        later[j] = key(op.channel) if isinstance(op, ChannelSendOp) else later[j + 1]
    due: set[Operation] = set()
    out: list[Operation] = []
    next_recv = 0

    def receive_upto(channel: int) -> None:
        nonlocal next_recv
        while next_recv < len(receives) and channel_of[receives[next_recv].result] <= channel:
            out.append(receives[next_recv])
            next_recv += 1

    for j, op in enumerate(ops):
        if isinstance(op, ChannelReceiveOp):
            due.add(op)
            continue
        while posted and next_recv < len(receives) and receives[next_recv] in due and \
                channel_of[receives[next_recv].result] < later[j]:
            receive_upto(channel_of[receives[next_recv].result])
        needed = [channel_of[v] for v in op.operands() if v in channel_of]
        if isinstance(op, ChannelSendOp):
            needed.append(key(op.channel) - 1)
        if needed:
            receive_upto(max(needed))
        out.append(op)
    out.extend(receives[next_recv:])
    return out


def posts_earlier(module: Module, rank: Rank | None = None) -> bool:
    """Whether the blocking order puts some receive before an op it followed (a receive
    posted after a send of a higher channel). Receives that only move later keep every
    buffer within the lifetime the memory plan of the original order gave it; one that
    moves earlier needs a plan made in the blocking order."""
    for body in _programs(module):
        before = _receive_positions(body.ops)
        after = _receive_positions(blocking_order(body.ops, rank))
        if any(after[r] < k for r, k in before.items()):
            return True
    return False


def _programs(module: Module) -> list[Block]:
    """Each core's program: its body, or a stream program's loop body (one iteration,
    whose channels are paired in order iteration after iteration)."""
    out = []
    for op in module.main().body.ops:
        if isinstance(op, CoreOp):
            ops = op.body.ops
            out.append(ops[0].body if len(ops) == 1 and isinstance(ops[0], StreamOp) else op.body)
    return out


def _receive_positions(ops: list[Operation]) -> dict[Operation, int]:
    """Each receive: how many other ops precede it."""
    out: dict[Operation, int] = {}
    k = 0
    for op in ops:
        if isinstance(op, ChannelReceiveOp):
            out[op] = k
        else:
            k += 1
    return out


@contextmanager
def pimsim_order(module: Module, rank: Rank | None = None) -> Iterator[Module]:
    """Within the block, every core program of `module` runs in the blocking order of
    `rank` (the same op objects, so timings keyed by op stay valid); the original order
    returns after. Export and the pimsim-nn-model simulation must see the same order: pass
    the export's `Export.rank`."""
    saved: list[tuple[Block, list[Operation]]] = []
    for body in _programs(module):
        saved.append((body, body.ops))
        body.ops = blocking_order(body.ops, rank)
    try:
        yield module
    finally:
        for body, ops in saved:
            body.ops = ops


def message_rank(module: Module, injected: Mapping[int, int]) -> dict[int, int] | None:
    """A message order from when each channel's message left in a run whose receives
    never block (`injected`: channel -> time), by `raptor.noc.pimsim_message_order`. A
    message leaves before any op reading it starts (transfers take time), and a core's
    later sends leave no earlier, so every receive keeps its place before its first
    reader and the order cannot deadlock. None if some send did not run."""
    made: list[tuple[int, int, int]] = []
    channels: list[int] = []
    for i, body in enumerate(_programs(module)):
        sends = [op for op in body.ops if isinstance(op, ChannelSendOp)]
        for k, op in enumerate(sends):
            if op.channel not in injected:
                return None
            made.append((injected[op.channel], i, k))
            channels.append(op.channel)
    return {channels[i]: r for r, i in enumerate(noc.pimsim_message_order(made))}
