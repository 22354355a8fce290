"""The random-network generator and a seeded differential campaign in CI (#29)."""

from __future__ import annotations

from collections import Counter

import onnx

from raptor.frontend.onnx_import import SUPPORTED_OPS
from tests.fuzz.diffnets import run_nets
from tests.fuzz.random_nets import GENERATORS, NOT_GENERATED, random_net
from tests.fuzz.shrink import shrink

CI_NETS = range(16)
ALLOWED = ("ok", "refused", "refused: memory")
"""A clean refusal is an answer; a memory refusal is the spilling work's (#23)."""


def test_every_supported_operator_is_generated_or_excused() -> None:
    """The generator grows with the frontend: a new converter fails this until it is drawn
    (GENERATORS) or excused with a reason (NOT_GENERATED)."""
    assert set(GENERATORS) | set(NOT_GENERATED) == set(SUPPORTED_OPS)
    assert not set(GENERATORS) & set(NOT_GENERATED)


def test_a_seed_names_one_network() -> None:
    a, b = random_net(7), random_net(7)
    assert a.model.SerializeToString() == b.model.SerializeToString()
    assert all((x == y).all() for x, y in zip(a.expected, b.expected, strict=True))
    assert random_net(8).model.SerializeToString() != a.model.SerializeToString()


def test_networks_draw_every_kind_of_convolution() -> None:
    """Over the CI seeds: strided, dilated, grouped, depthwise and padded convolutions."""
    kinds: Counter[str] = Counter()
    for seed in CI_NETS:
        for n in random_net(seed).model.graph.node:
            if n.op_type != "Conv":
                continue
            a = {x.name: x for x in n.attribute}
            ints = {k: list(v.ints) for k, v in a.items()}
            kinds["strided"] += max(ints.get("strides", [1])) > 1
            kinds["dilated"] += max(ints.get("dilations", [1])) > 1
            kinds["padded"] += max(ints.get("pads", [0])) > 0
            kinds["grouped"] += a["group"].i > 1 if "group" in a else 0
    assert min(kinds[k] for k in ("strided", "dilated", "padded", "grouped")) > 0, kinds


def test_seeded_campaign_gives_only_answers_and_clear_refusals() -> None:
    """16 networks x (solve latency, solve pipeline, interpret --check), each twice: every
    run ok (outputs equal onnxruntime's) or one clear refusal, and both runs agree."""
    nets, outs = run_nets(CI_NETS, jobs=2, timeout=120)
    assert len(outs) == 3 * len(nets)
    bad = [o for o in outs if o.klass not in ALLOWED]
    assert not bad, "\n".join(f"net {o.net} {o.command}: {o.klass}: {o.detail}" for o in bad)
    assert sum(o.klass == "ok" for o in outs) >= len(outs) // 2


def test_shrinking_keeps_the_failure_and_drops_the_rest() -> None:
    """A stand-in failure ("holds a MaxPool and a Conv with >= 2 output channels") on a
    13-node network shrinks to a few nodes, the conv at 2 or 3 channels; every step a
    valid model (what cannot be bypassed for its shape, such as a concat, may stay)."""
    net = random_net(2)

    def fails(m: onnx.ModelProto) -> bool:
        kinds = [n.op_type for n in m.graph.node]
        init = {t.name: t.dims for t in m.graph.initializer}
        return "MaxPool" in kinds and any(n.op_type == "Conv" and init[n.input[1]][0] >= 2
                                          for n in m.graph.node)

    assert fails(net.model) and len(net.model.graph.node) == 13
    small = shrink(net.model, fails)
    onnx.checker.check_model(small, full_check=True)
    assert fails(small) and len(small.graph.node) <= 4
    conv = next(n for n in small.graph.node if n.op_type == "Conv")
    assert {t.name: t.dims for t in small.graph.initializer}[conv.input[1]][0] <= 3
