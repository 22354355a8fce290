"""Shrink a failing ONNX model to a minimal one that fails the same way.

Greedy delta debugging over valid models only: every candidate passes `onnx.checker` and
shape inference before the predicate sees it. Steps, repeated until none applies:
  - keep one graph output (drop the others);
  - cut the graph at a node (its output becomes the graph output; what follows goes);
  - bypass a node (its readers read one of its inputs of the same shape instead);
  - drop nodes nothing reads;
  - halve the output channels of a convolution (its weights and bias sliced), when the
    graph stays valid.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

Predicate = Callable[[onnx.ModelProto], bool]


def _shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...]]:
    g = model.graph
    out = {}
    for vi in [*g.input, *g.value_info, *g.output]:
        dims = vi.type.tensor_type.shape.dim
        out[vi.name] = tuple(d.dim_value for d in dims)
    for t in g.initializer:
        out[t.name] = tuple(t.dims)
    return out


def _finish(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """Dead nodes and initializers dropped, shapes inferred again; None when invalid."""
    g = model.graph
    need = {o.name for o in g.output}
    keep = []
    for n in reversed(g.node):
        if any(o in need for o in n.output):
            keep.append(n)
            need.update(i for i in n.input if i)
    keep.reverse()
    inits = [t for t in g.initializer if t.name in need]
    inputs = [i for i in g.input if i.name in need]
    if not inputs:
        return None
    outs = []
    for o in g.output:
        vi = helper.make_tensor_value_info(o.name, o.type.tensor_type.elem_type, None)
        outs.append(vi)
    graph = helper.make_graph(keep, g.name, inputs, outs, inits)
    m = helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    m.producer_name = model.producer_name
    try:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        onnx.checker.check_model(m, full_check=True)
    except Exception:
        return None
    return m


def _with(model: onnx.ModelProto, nodes: list[onnx.NodeProto] | None = None,
          outputs: list[str] | None = None,
          inits: list[onnx.TensorProto] | None = None,
          inputs: list[onnx.ValueInfoProto] | None = None) -> onnx.ModelProto | None:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    if nodes is not None:
        del m.graph.node[:]
        m.graph.node.extend(nodes)
    if outputs is not None:
        del m.graph.output[:]
        m.graph.output.extend(helper.make_tensor_value_info(o, 1, None) for o in outputs)
    if inits is not None:
        del m.graph.initializer[:]
        m.graph.initializer.extend(inits)
    if inputs is not None:
        del m.graph.input[:]
        m.graph.input.extend(inputs)
    del m.graph.value_info[:]
    return _finish(m)


def _renamed(nodes: list[onnx.NodeProto], old: str, new: str) -> list[onnx.NodeProto]:
    out = []
    for n in nodes:
        c = onnx.NodeProto()
        c.CopyFrom(n)
        for k, i in enumerate(c.input):
            if i == old:
                c.input[k] = new
        out.append(c)
    return out


def _candidates(model: onnx.ModelProto) -> list[onnx.ModelProto | None]:
    """Smaller variants of `model`, the most aggressive first."""
    g = model.graph
    nodes = list(g.node)
    outs = [o.name for o in g.output]
    shapes = _shapes(model)
    cands: list[onnx.ModelProto | None] = []
    if len(outs) > 1:
        cands += [_with(model, outputs=[o]) for o in outs]
    for n in nodes[:-1]:  # cut at a node: its first output becomes the graph's
        cands.append(_with(model, outputs=[n.output[0]]))
    for k, n in enumerate(nodes):  # bypass a node
        out = n.output[0]
        for i in n.input:
            if i and i not in {t.name for t in g.initializer} and shapes.get(i) == shapes.get(out):
                rest = _renamed(nodes[:k] + nodes[k + 1:], out, i)
                new_outs = [i if o == out else o for o in outs]
                if len(set(new_outs)) == len(new_outs):
                    cands.append(_with(model, nodes=rest, outputs=new_outs))
                break
    cands += _channel_cuts(model)
    return cands


def _channel_cuts(model: onnx.ModelProto) -> list[onnx.ModelProto | None]:
    """Halve the output channels of one ungrouped conv (weights and bias sliced); valid
    only when every consumer accepts fewer channels, which shape inference and the
    checker decide."""
    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    out: list[onnx.ModelProto | None] = []
    for n in g.node:
        if n.op_type != "Conv" or n.input[1] not in inits:
            continue
        w = inits[n.input[1]]
        group = next((a.i for a in n.attribute if a.name == "group"), 1)
        if group != 1 or w.shape[0] < 2:
            continue
        half = w.shape[0] // 2
        new = dict(inits)
        new[n.input[1]] = w[:half]
        if len(n.input) > 2 and n.input[2] in inits:
            new[n.input[2]] = inits[n.input[2]][:half]
        out.append(_with(model, inits=[numpy_helper.from_array(np.ascontiguousarray(v), name)
                                       for name, v in new.items()]))
    return out


def shrink(model: onnx.ModelProto, fails: Predicate, budget: int = 200) -> onnx.ModelProto:
    """The smallest model reached greedily from `model` on which `fails` still holds
    (at most `budget` predicate calls)."""
    calls = 0
    progress = True
    while progress and calls < budget:
        progress = False
        for cand in _candidates(model):
            if cand is None or _size(cand) >= _size(model):
                continue
            calls += 1
            if fails(cand):
                model, progress = cand, True
                break
            if calls >= budget:
                break
    return model


def _size(model: onnx.ModelProto) -> tuple[int, int]:
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    return len(model.graph.node), params
