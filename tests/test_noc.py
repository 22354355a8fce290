"""The network-timing module: XY routes with one link numbering, serialization, free-link
latency, and cut-through reservations (figures by hand at 1 GHz: a hop 2 ns, an 8-byte flit
2 ns)."""

from __future__ import annotations

import dataclasses
import itertools
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raptor import noc
from raptor.noc import FreeLinks, LinkLog, Network, Timelines
from raptor.target import Target, TargetError, load_target, target_from_dict

LINE = Target(mesh_rows=1, mesh_cols=4)
GRID = Target(mesh_rows=3, mesh_cols=4)


def test_routes_go_along_the_row_then_the_column_over_neighbours() -> None:
    net = Network(GRID)
    for src, dst in itertools.product(range(GRID.num_cores), repeat=2):
        links = net.route(src, dst)
        assert len(links) == GRID.hops(src, dst)
        here, turned = src, False
        for link in links:
            a, b = net.link_ends(link)
            assert a == here and net.link(a, b) == link
            vertical = abs(b - a) == GRID.mesh_cols
            assert not (turned and not vertical)  # no row move after a column move
            turned |= vertical
            here = b
        assert here == dst
    assert len(net.links()) == GRID.mesh_links == len(set(net.links()))
    assert all(0 <= link < net.num_links for link in net.links())


def test_message_timing_is_the_targets() -> None:
    net = Network(GRID)
    route = net.message(0, 11, 100)  # 5 hops, 13 flits
    assert route.serial_ns == 26 == noc.serial_cycles(GRID, 100)
    assert route.transfer_ns == 5 * 2 + 26 == GRID.transfer_ns(100, 0, 11)
    assert net.message(3, 3, 100) == noc.Route((), 26, 0)
    sizes = np.array([1, 8, 9, 64])
    assert noc.flits(GRID, sizes).tolist() == [1, 1, 2, 8]
    assert noc.free_cycles(GRID, np.array([0, 1, 2, 3]), sizes).tolist() == [2, 4, 8, 22]


def test_timelines_insert_into_idle_time_and_merge() -> None:
    tl = Timelines(1)
    tl.reserve(0, 10, 5)
    tl.reserve(0, 30, 10)
    assert tl.fit(0, 0, 10) == 0 and tl.fit(0, 8, 10) == 15 and tl.fit(0, 12, 16) == 40
    tl.reserve(0, 15, 15)  # fills the gap exactly: one interval [10, 40)
    assert tl.intervals(0) == [(10, 40)]


def test_committed_walks_reserve_each_link_where_its_head_takes_it() -> None:
    """Random messages committed on a 4x4 mesh against a plain model (per link, a list of
    busy intervals; the head takes each link at its first free stretch from one hop after
    the previous link): the same arrivals, and the same busy time, kept merged."""
    target = Target(mesh_rows=4, mesh_cols=4)
    net = Network(target)
    links = Timelines(net.num_links)
    busy: dict[int, list[tuple[int, int]]] = {}
    rng = random.Random(5)
    for _ in range(400):
        src, dst, inject = rng.randrange(16), rng.randrange(16), rng.randrange(3000)
        route, ser, transfer = net.timing(src, dst, rng.randrange(1, 200))
        head = inject - net.hop_ns
        for link in route:
            head += net.hop_ns
            while any(s < head + ser and head < e for s, e in busy.get(link, [])):
                head = min(e for s, e in busy[link] if s < head + ser and head < e)
            busy.setdefault(link, []).append((head, head + ser))
        want = transfer + head - (len(route) - 1) * net.hop_ns if route else inject
        assert links.arrival(route, ser, transfer, net.hop_ns, inject, True) == want
    for link in range(net.num_links):
        merged: list[list[int]] = []
        for s, e in sorted(busy.get(link, [])):
            if merged and merged[-1][1] == s:
                merged[-1][1] = e
            else:
                merged.append([s, e])
        assert links.intervals(link) == [(s, e) for s, e in merged]


@pytest.mark.parametrize(("rows", "cols"), [(3, 4), (1, 5), (4, 1), (1, 1)])
def test_kernel_routes_and_timings_are_the_networks(rows: int, cols: int) -> None:
    """`noc.route_into` over `Network.next_links` gives `Network.route` (XY and YX) for
    every pair, and `Network.by_hops` (by `Network.kind`) its `timing`."""
    net = Network(Target(mesh_rows=rows, mesh_cols=cols))
    xy, yx, to = net.next_links()
    out = np.empty(rows + cols, dtype=np.int64)
    for src, dst in itertools.product(range(rows * cols), repeat=2):
        for table, way in ((xy, False), (yx, True)):
            n = noc.route_into(table, to, src, dst, out)
            assert tuple(out[:n].tolist()) == net.route(src, dst, way)
        for nbytes in (1, 8, 9, 100):
            links, ser, transfer = net.timing(src, dst, nbytes)
            kind = net.kind(nbytes)  # (may add a row to by_hops)
            assert net.by_hops[kind, len(links)].tolist() == [ser, transfer]


def test_timelines_rows_move_and_pools_grow_keeping_every_interval() -> None:
    """Random reservations on one table against a plain list per resource: rows that fill
    move to the pools' end and the pools double, and every row keeps its intervals."""
    rng = random.Random(11)
    tl = Timelines(5)
    busy: list[list[tuple[int, int]]] = [[] for _ in range(5)]
    for _ in range(600):
        r, dur = rng.randrange(5), rng.randint(1, 30)
        s = tl.fit(r, rng.randrange(20000), dur)
        assert all(s + dur <= a or b <= s for a, b in busy[r])
        tl.reserve(r, s, dur)
        busy[r].append((s, s + dur))
    assert len(tl.starts) > 8 * 5 and tl.room.max() > 8  # grown and moved
    for r in range(5):
        merged: list[list[int]] = []
        for a, b in sorted(busy[r]):
            if merged and merged[-1][1] == a:
                merged[-1][1] = b
            else:
                merged.append([a, b])
        assert tl.intervals(r) == [(a, b) for a, b in merged]


def test_messages_sharing_a_link_wait_for_each_other() -> None:
    """Core 0 sends 64 B to core 3 (three hops) and then to core 2 over the same first two
    links: the second waits at the first link for the 16 ns serialisation of the first."""
    net = Network(LINE)
    links = Timelines(net.num_links)

    def arrival(src: int, dst: int, commit: bool) -> int:
        links.commit = commit
        return net.pass_links(*net.timing(src, dst, 64), 100, links)

    assert arrival(0, 3, commit=True) == 100 + 3 * 2 + 16
    assert arrival(0, 2, commit=False) == 116 + 2 * 2 + 16
    assert arrival(0, 2, commit=False) == 116 + 2 * 2 + 16  # nothing was reserved
    # a message injected earlier on the free opposite direction is not delayed
    assert arrival(3, 0, commit=True) == 122


def test_a_walk_with_a_limit_stops_only_past_it() -> None:
    """Random reservations on a 4x4 mesh: with a limit, a walk that does not commit gives
    the full walk's arrival when that is within the limit, and a time past the limit (and
    not past the arrival) otherwise."""
    target = Target(mesh_rows=4, mesh_cols=4)
    net = Network(target)
    links = Timelines(net.num_links)
    rng = random.Random(3)
    for _ in range(300):
        link = rng.randrange(net.num_links)
        links.reserve(link, links.fit(link, rng.randrange(5000), 20), 20)
    links.commit = False
    stopped = 0
    for _ in range(500):
        src, dst, inject = rng.randrange(16), rng.randrange(16), rng.randrange(5000)
        timing = net.timing(src, dst, rng.randrange(1, 200))
        full = net.pass_links(*timing, inject, links)
        limit = rng.randrange(inject, full + 50)
        got = net.pass_links(*timing, inject, links, limit)
        assert got == full if full <= limit else limit < got <= full
        stopped += got < full
    assert stopped > 0


def test_free_links_in_time_order_and_without_contention() -> None:
    net = Network(LINE)
    route = net.message(0, 3, 64)
    log = LinkLog()
    links = FreeLinks(net.num_links, log=log)
    assert net.cut_through(route, 100, links) == 122
    assert net.cut_through(route, 100, links) == 138  # behind the first at every link
    assert log.reservations()[:3] == [(0, 100, 116), (4, 102, 118), (8, 104, 120)]
    assert links.busy[0] == 32
    free = FreeLinks(net.num_links, contention=False)
    assert [net.cut_through(route, 100, free) for _ in range(2)] == [122, 122]


def test_pimsim_protocol_charges_every_flit_the_path_on_the_senders_switch() -> None:
    """0 -> 11 on the 3x4 grid: 5 hops, one flit 5 * 2 + 2 = 12 ns; 100 IR bytes (25 f32
    elements) are 25 bytes at the chip's 8 bits, 4 flits, after a one-flit request and
    reply. A second message from core 0 waits for the switch; one from core 1 does not."""
    t = Target(mesh_rows=3, mesh_cols=4, protocol="pimsim-nn")
    net = Network(t)
    assert noc.wire_bytes(t, 100) == 25
    route = net.message(0, 11, 100)
    assert route == noc.Route((4 * 12 + 0,), 4 * 12, 6 * 12)
    switches = FreeLinks(net.num_links)
    assert net.cut_through(route, 100, switches) == 100 + 72
    assert net.cut_through(route, 100, switches) == 100 + 48 + 72
    assert net.cut_through(net.message(1, 11, 100), 100, switches) == 100 + 6 * 10
    assert Network(t, "raptor").message(0, 11, 100) == Network(GRID).message(0, 11, 100)


def test_protocol_is_a_target_key() -> None:
    assert Target().protocol == "raptor"
    assert load_target("pimsim-nn").protocol == "pimsim-nn"
    with pytest.raises(TargetError, match="'protocol' must be one of raptor, pimsim-nn"):
        target_from_dict({"protocol": "ethernet"}, "t")


def test_pimsim_message_order_interleaves_the_bursts_of_one_instant() -> None:
    """Messages (time, sender, place in its program): by time; at one instant every
    sender's first before any sender's second; each sender's own order kept."""
    made = [(5, 0, 0), (5, 0, 1), (5, 0, 2), (5, 1, 0), (5, 1, 1), (3, 2, 0), (9, 1, 2)]
    order = noc.pimsim_message_order(made)
    assert [made[i] for i in order] == [(3, 2, 0), (5, 0, 0), (5, 1, 0), (5, 0, 1),
                                        (5, 1, 1), (5, 0, 2), (9, 1, 2)]


@pytest.mark.parametrize("shape", [(1, 5), (3, 4), (4, 4), (5, 2)])
def test_first_links_are_the_routes_first_links(shape: tuple[int, int]) -> None:
    net = Network(Target(mesh_rows=shape[0], mesh_cols=shape[1]))
    cores = shape[0] * shape[1]
    for src, yx in itertools.product(range(cores), (False, True)):
        assert net.first_links(src, yx).tolist() == [
            net.route(src, q, yx)[0] if q != src else -1 for q in range(cores)]


def test_yx_routes_go_along_the_column_then_the_row_with_the_same_hops() -> None:
    net = Network(GRID)
    for src, dst in itertools.product(range(GRID.num_cores), repeat=2):
        links = net.route(src, dst, yx=True)
        assert len(links) == GRID.hops(src, dst)
        here, turned = src, False
        for link in links:
            a, b = net.link_ends(link)
            assert a == here and net.link(a, b) == link
            horizontal = abs(b - a) == 1
            assert not (turned and not horizontal)  # no column move after a row move
            turned |= horizontal
            here = b
        assert here == dst
        assert net.timing(src, dst, 100, True)[1:] == net.timing(src, dst, 100)[1:]
        same_line = src // 4 == dst // 4 or src % 4 == dst % 4
        assert (links == net.route(src, dst)) == same_line


def test_routing_is_a_target_key() -> None:
    assert Target().routing == "xy"
    assert target_from_dict({"routing": "xy-yx"}, "t").routing == "xy-yx"
    with pytest.raises(TargetError, match="'routing' must be one of xy, xy-yx"):
        target_from_dict({"routing": "west-first"}, "t")


def test_a_fan_out_leaves_on_two_links_when_yx_is_sooner() -> None:
    """Core 0 of the 3x4 grid sends 64 B to core 5 (one hop east, one south), then the same
    to core 6: XY, the second waits 16 ns on link 0->1 behind the first; YX takes 0->4
    first, free, and arrives as over free links. Under ``routing = "xy"``, or on free
    links, XY; a destination in the sender's row has one route."""
    net = Network(dataclasses.replace(GRID, routing="xy-yx"))
    for table in (FreeLinks(net.num_links), Timelines(net.num_links)):
        links, ser, transfer = net.timing(0, 5, 64)
        assert not net.yx_sooner(0, 5, ser, 100, table)  # all free: XY
        assert net.pass_links(links, ser, transfer, 100, table) == 100 + transfer
        assert net.yx_sooner(0, 6, ser, 100, table)
        assert not net.yx_sooner(0, 2, ser, 100, table)  # along the row: one route
        assert not Network(GRID).yx_sooner(0, 6, ser, 100, table)
        assert net.pass_links(*net.timing(0, 6, 64, True), 100, table) == \
            100 + net.timing(0, 6, 64)[2]
    assert not net.yx_sooner(0, 6, ser, 100, FreeLinks(net.num_links, contention=False))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.integers(1, 4), st.integers(1, 4), st.lists(
    st.tuples(st.integers(0, 15), st.integers(0, 15), st.integers(1, 200),
              st.integers(0, 60)), min_size=1, max_size=12), st.booleans())
def test_a_chosen_route_is_minimal_and_never_later_than_xy(
        rows: int, cols: int, messages: list[tuple[int, int, int, int]],
        timelines: bool) -> None:
    """Random messages on a small mesh, each injected in turn on one link table: the
    chosen route runs from the sender to the receiver over neighbours, as many hops as
    XY, and arrives no later than XY would have on the same table."""
    net = Network(Target(mesh_rows=rows, mesh_cols=cols, routing="xy-yx"))
    cores = rows * cols
    table: FreeLinks | Timelines = Timelines(net.num_links) if timelines \
        else FreeLinks(net.num_links)
    for src, dst, nbytes, inject in sorted(messages, key=lambda m: m[3]):
        src, dst = src % cores, dst % cores
        xy = net.timing(src, dst, nbytes)
        yx = net.yx_sooner(src, dst, xy[1], inject, table)
        links = net.route(src, dst, yx)
        here = src
        for link in links:
            a, b = net.link_ends(link)
            assert a == here and abs(b - a) in (1, cols)
            here = b
        assert here == dst and len(links) == len(xy[0])
        hop, (xy_links, ser, transfer) = net.hop_ns, xy
        if not xy_links:
            was = inject
        elif isinstance(table, Timelines):
            was = table.arrival(xy_links, ser, transfer, hop, inject, False)
        else:
            was = transfer + table.probe(xy_links, inject, hop, ser) - (len(links) - 1) * hop
        assert net.pass_links(*net.timing(src, dst, nbytes, yx), inject, table) <= was
