"""Seeded random *valid* ONNX networks from the frontend's supported operators.

`random_net(seed)` draws a DAG of 3-25 operators over NCHW activations (and a flattened
tail for Gemm/MatMul/Softmax): convolutions strided, dilated, grouped, depthwise and
asymmetrically padded, transposed convolutions, pooling with and without `ceil_mode`,
elementwise ops with broadcast constants, concats, residual joins, resizes, pads, slices,
splits, reshapes and normalizations. Every network passes `onnx.checker` (full check) and
runs in onnxruntime with finite outputs; a draw that does not is redrawn from the next
sub-seed, so a seed names one network for good.

`GENERATORS` maps each ONNX operator to the code that draws it; `NOT_GENERATED` names the
supported operators left out and why. `tests/fuzz/test_random_nets.py` fails when the
frontend gains an operator that is in neither, so the generator grows with the op list.
The differential harness is `benchmarks/diffnets.py`; docs/fuzz.md describes both.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from examples.build_examples import NetBuilder

Shape = tuple[int, ...]


@dataclass(frozen=True)
class RandomNet:
    """A drawn network: the model, inputs keyed by name, onnxruntime's outputs, and the
    operator mix (ONNX node op types with counts)."""

    seed: int
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]
    expected: list[np.ndarray]
    ops: Counter[str]


class _Draw:
    """One network under construction: a pool of live 4-D (and 2-D) tensors to draw from."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.b = NetBuilder(seed)
        self.inputs: dict[str, list[int]] = {}
        self.shape: dict[str, Shape] = {}
        self.used: set[str] = set()
        self.order: list[str] = []
        c = self.r.choice([1, 2, 3, 4, 6, 8])
        h, w = self.r.randint(1, 14), self.r.randint(1, 14)
        if self.r.random() < 0.2:
            h = w = self.r.choice([4, 8, 12])
        self._input("x", (1, c, h, w))
        if self.r.random() < 0.15:  # a second input, same spatial size
            self._input("x2", (1, self.r.choice([1, 2, 4]), h, w))

    def _input(self, name: str, shape: Shape) -> None:
        self.inputs[name] = list(shape)
        self.add(name, shape)

    def add(self, name: str, shape: Shape) -> str:
        self.shape[name] = shape
        self.order.append(name)
        return name

    def pick(self, rank: int = 4, pred: Callable[[Shape], bool] | None = None) -> str | None:
        """A live tensor of `rank` (recent ones likelier), or None."""
        cands = [n for n in self.order if len(self.shape[n]) == rank
                 and (pred is None or pred(self.shape[n]))]
        if not cands:
            return None
        # recent tensors dominate, so chains grow deep; older ones make residual joins
        i = len(cands) - 1 - min(int(self.r.expovariate(0.7)), len(cands) - 1)
        name = cands[i]
        self.used.add(name)
        return name

    def const(self, shape: Shape, lo: float = -1.0, hi: float = 1.0) -> str:
        a = self.b.rng.uniform(lo, hi, shape).astype(np.float32)
        return self.b.const(self.b.fresh("k"), a)

    def ints(self, values: list[int]) -> str:
        return self.b.const(self.b.fresh("i"), np.array(values, np.int64))

    def node(self, op: str, inputs: list[str], shape: Shape, **attrs: object) -> str:
        return self.add(self.b.node(op, inputs, None, **attrs), shape)


def _out(size: int, k: int, stride: int, pad: int, dil: int = 1, ceil: bool = False) -> int:
    span = size + pad - dil * (k - 1) - 1
    return (-(-span // stride) if ceil else span // stride) + 1


def _window(d: _Draw, size: int, ceil: bool = False, dilate: bool = True
            ) -> tuple[int, int, int, int, int]:
    """(kernel, stride, pad_begin, pad_end, dilation) of a window along a dim of `size`."""
    r = d.r
    for _ in range(20):
        k = r.choice([1, 1, 2, 3, 3, 5])
        s = r.choice([1, 1, 1, 2, 2, 3])
        dil = r.choice([1, 1, 1, 2]) if dilate and k > 1 else 1
        pb, pe = r.randint(0, k - 1), r.randint(0, k - 1)
        if r.random() < 0.5:
            pb = pe = (dil * (k - 1)) // 2 if dil * (k - 1) // 2 < k else pb
        if _out(size, k, s, pb + pe, dil, ceil) >= 1:
            return k, s, pb, pe, dil
    return 1, 1, 0, 0, 1


def _conv(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    _, c, h, w = d.shape[x]
    divisors = [g for g in range(1, c + 1) if c % g == 0]
    kind = d.r.random()
    if kind < 0.2:
        group, cout = c, c * d.r.choice([1, 1, 2])  # depthwise (multiplier 1 or 2)
    elif kind < 0.35:
        group = d.r.choice(divisors)
        cout = group * d.r.randint(1, max(1, 12 // group))
    else:
        group, cout = 1, d.r.randint(1, 16)
    kh, sh, ph0, ph1, dh = _window(d, h)
    kw, sw, pw0, pw1, dw = _window(d, w)
    if d.r.random() < 0.5:  # square kernels are the common case
        kw, sw, pw0, pw1, dw = kh, sh, ph0, ph1, dh
        if _out(w, kw, sw, pw0 + pw1, dw) < 1:
            kw, sw, pw0, pw1, dw = 1, 1, 0, 0, 1
    wt = d.const((cout, c // group, kh, kw), -0.5, 0.5)
    ins = [x, wt] + ([d.const((cout,), -0.2, 0.2)] if d.r.random() < 0.7 else [])
    shape = (1, cout, _out(h, kh, sh, ph0 + ph1, dh), _out(w, kw, sw, pw0 + pw1, dw))
    attrs: dict[str, object] = {"kernel_shape": [kh, kw], "strides": [sh, sw],
                                "pads": [ph0, pw0, ph1, pw1], "group": group}
    if dh != 1 or dw != 1 or d.r.random() < 0.2:
        attrs["dilations"] = [dh, dw]
    if d.r.random() < 0.1 and sh == sw == 1 and dh == dw == 1:
        del attrs["pads"]
        attrs["auto_pad"] = "SAME_UPPER"
        shape = (1, cout, h, w)
    d.node("Conv", ins, shape, **attrs)


def _conv_transpose(d: _Draw) -> None:
    x = d.pick(pred=lambda s: s[2] * s[3] <= 64)
    if x is None:
        return
    _, c, h, w = d.shape[x]
    k, s = d.r.choice([(2, 2), (3, 2), (3, 1), (1, 1), (4, 2)])
    p = d.r.randint(0, (k - 1) // 2)
    cout = d.r.randint(1, 8)
    ins = [x, d.const((c, cout, k, k), -0.5, 0.5)] + ([d.const((cout,))] if d.r.random() < .5
                                                       else [])
    oh, ow = (h - 1) * s - 2 * p + k, (w - 1) * s - 2 * p + k
    if min(oh, ow) < 1:
        return
    d.node("ConvTranspose", ins, (1, cout, oh, ow), kernel_shape=[k, k], strides=[s, s],
           pads=[p] * 4)


def _pool(d: _Draw, op: str) -> None:
    x = d.pick()
    assert x is not None
    _, c, h, w = d.shape[x]
    ceil = d.r.random() < 0.3
    kh, sh, ph0, ph1, dh = _window(d, h, ceil, dilate=op == "MaxPool")
    kw, sw, pw0, pw1, dw = kh, sh, ph0, ph1, dh
    if _out(w, kw, sw, pw0 + pw1, dw, ceil) < 1:
        kw, sw, pw0, pw1, dw = _window(d, w, ceil, dilate=op == "MaxPool")
    # onnxruntime rejects a pad as large as the kernel; a ceil window must start inside
    oh, ow = _out(h, kh, sh, ph0 + ph1, dh, ceil), _out(w, kw, sw, pw0 + pw1, dw, ceil)
    if ceil and ((oh - 1) * sh >= h + ph0 or (ow - 1) * sw >= w + pw0):
        ceil = False
        oh, ow = _out(h, kh, sh, ph0 + ph1, dh), _out(w, kw, sw, pw0 + pw1, dw)
        if min(oh, ow) < 1:
            return
    attrs: dict[str, object] = {"kernel_shape": [kh, kw], "strides": [sh, sw],
                                "pads": [ph0, pw0, ph1, pw1]}
    if ceil:
        attrs["ceil_mode"] = 1
    if op == "MaxPool" and (dh != 1 or dw != 1):
        attrs["dilations"] = [dh, dw]
    if op == "AveragePool" and d.r.random() < 0.5:
        attrs["count_include_pad"] = 1
    d.node(op, [x], (1, c, oh, ow), **attrs)


def _global_pool(d: _Draw, op: str) -> None:
    x = d.pick()
    assert x is not None
    d.node(op, [x], (*d.shape[x][:2], 1, 1))


def _unary(d: _Draw, op: str, **attrs: object) -> None:
    x = d.pick(rank=d.r.choice([4, 4, 4, 2]))
    if x is None:
        x = d.pick()
    assert x is not None
    d.node(op, [x], d.shape[x], **attrs)


def _clip(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    lo = d.b.const(d.b.fresh("lo"), np.array(d.r.choice([0.0, -0.5, -1.0]), np.float32))
    hi = d.b.const(d.b.fresh("hi"), np.array(d.r.choice([0.5, 1.0, 6.0]), np.float32))
    d.node("Clip", [x, lo, hi] if d.r.random() < 0.8 else [x, lo], d.shape[x])


def _prelu(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    c = d.shape[x][1]
    d.node("PRelu", [x, d.const(d.r.choice([(c, 1, 1), (1,)]), 0.0, 0.5)], d.shape[x])


def _bcast_shape(d: _Draw, s: Shape) -> Shape:
    """A shape that broadcasts to `s`."""
    options: list[Shape] = [(), (1,), s, s[1:]]
    if len(s) == 4:
        options += [(s[1], 1, 1), (1, s[1], 1, 1), (s[3],), (1, 1, 1, s[3]), (s[2], 1),
                    (1, 1, s[2], s[3])]
    return d.r.choice(options)


def _binary(d: _Draw, op: str) -> None:
    rank = d.r.choice([4, 4, 4, 4, 2])
    x = d.pick(rank) or d.pick()
    assert x is not None
    s = d.shape[x]
    other = d.pick(len(s), lambda t: t == s) if d.r.random() < 0.6 else None
    if other is None or (other == x and d.r.random() < 0.5):
        lo, hi = (0.5, 2.0) if op == "Div" else (-1.0, 1.0)
        other = d.const(_bcast_shape(d, s), lo, hi)
    elif op == "Div":  # a divisor bounded away from zero: 1 + sigmoid(other)
        sig = d.node("Sigmoid", [other], s)
        other = d.node("Add", [sig, d.const((1,), 1.0, 1.0)], s)
    ins = [x, other] if d.r.random() < 0.7 or op == "Div" or op == "Sub" else [other, x]
    d.node(op, ins, s)


def _silu(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    sig = d.node("Sigmoid", [x], d.shape[x])
    d.node("Mul", [x, sig] if d.r.random() < 0.5 else [sig, x], d.shape[x])


def _residual(d: _Draw) -> None:
    """conv(x) + x: the ResNet join."""
    x = d.pick()
    assert x is not None
    _, c, h, w = d.shape[x]
    k = d.r.choice([1, 3])
    y = d.node("Conv", [x, d.const((c, c, k, k), -0.3, 0.3)], (1, c, h, w),
               kernel_shape=[k, k], pads=[k // 2] * 4)
    if d.r.random() < 0.5:
        y = d.node("Relu", [y], (1, c, h, w))
    d.node("Add", [y, x] if d.r.random() < 0.5 else [x, y], (1, c, h, w))


def _concat(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    s = d.shape[x]
    parts = [x]
    for _ in range(d.r.randint(1, 2)):
        y = d.pick(4, lambda t: t[2:] == s[2:])
        if y is None or d.r.random() < 0.3:
            y = d.node("Relu", [x], s)
        parts.append(y)
    axis = 1 if d.r.random() < 0.85 else d.r.choice([2, 3])
    if axis != 1:
        parts = [p for p in parts if d.shape[p][:axis] + d.shape[p][axis + 1:]
                 == s[:axis] + s[axis + 1:]] or [x, x]
    total = sum(d.shape[p][axis] for p in parts)
    d.node("Concat", parts, (*s[:axis], total, *s[axis + 1:]), axis=axis)


def _resize(d: _Draw, op: str = "Resize") -> None:
    x = d.pick(pred=lambda s: s[2] * s[3] <= 64)
    if x is None:
        return
    _, c, h, w = d.shape[x]
    fh, fw = d.r.choice([(2, 2), (2, 2), (1, 2), (2, 1), (3, 3)])
    mode = "linear" if d.r.random() < 0.15 else "nearest"
    scales = d.b.const(d.b.fresh("scales"), np.array([1, 1, fh, fw], np.float32))
    attrs: dict[str, object] = {"mode": mode}
    if mode == "linear":
        attrs["coordinate_transformation_mode"] = d.r.choice(["half_pixel", "asymmetric",
                                                               "align_corners"])
    d.node("Resize", [x, "", scales], (1, c, h * fh, w * fw), **attrs)


def _pad(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    _, c, h, w = d.shape[x]
    mode = d.r.choice(["constant", "constant", "reflect", "edge"])
    lim = (lambda n: n - 1) if mode == "reflect" else (lambda n: 3)
    t, b_ = d.r.randint(0, min(2, lim(h))), d.r.randint(0, min(2, lim(h)))
    le, ri = d.r.randint(0, min(2, lim(w))), d.r.randint(0, min(2, lim(w)))
    ins = [x, d.ints([0, 0, t, le, 0, 0, b_, ri])]
    if mode == "constant" and d.r.random() < 0.5:
        ins.append(d.b.const(d.b.fresh("v"), np.array(d.r.choice([0.0, 0.5, -1.0]),
                                                         np.float32)))
    d.node("Pad", ins, (1, c, h + t + b_, w + le + ri), mode=mode)


def _batch_norm(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    d.add(d.b.batch_norm(x, d.shape[x][1]), d.shape[x])


def _flatten_gemm(d: _Draw) -> None:
    x = d.pick(pred=lambda s: s[1] * s[2] * s[3] <= 512)
    if x is None:
        return
    n = int(np.prod(d.shape[x]))
    f = d.node("Flatten", [x], (1, n), axis=1)
    out = d.r.randint(1, 24)
    d.add(d.b.gemm(f, n, out), (1, out))


def _gemm(d: _Draw) -> None:
    x = d.pick(2)
    if x is None:
        _flatten_gemm(d)
        return
    k, out = d.shape[x][1], d.r.randint(1, 24)
    trans = d.r.random() < 0.5
    w = d.const((out, k) if trans else (k, out), -0.5, 0.5)
    ins = [x, w] + ([d.const(d.r.choice([(out,), (1, out), (1,)]))] if d.r.random() < 0.8
                    else [])
    d.node("Gemm", ins, (1, out), transB=int(trans))


def _matmul(d: _Draw) -> None:
    x = d.pick(d.r.choice([2, 4])) or d.pick()
    assert x is not None
    s = d.shape[x]
    out = d.r.randint(1, 16)
    d.node("MatMul", [x, d.const((s[-1], out), -0.5, 0.5)], (*s[:-1], out))


def _softmax(d: _Draw) -> None:
    x = d.pick(2) or d.pick()
    assert x is not None
    d.node("Softmax", [x], d.shape[x], axis=d.r.choice([-1, 1]) if len(d.shape[x]) == 4
           else -1)


def _transpose(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    s = d.shape[x]
    d.node("Transpose", [x], (s[0], s[1], s[3], s[2]), perm=[0, 1, 3, 2])


def _reshape(d: _Draw) -> None:
    x = d.pick(pred=lambda s: s[1] % 2 == 0)
    if x is None:
        x = d.pick()
        assert x is not None
        _, c, h, w = d.shape[x]
        new: Shape = (1, c, w, h)
    else:
        _, c, h, w = d.shape[x]
        new = (1, c // 2, 2 * h, w) if d.r.random() < 0.5 else (1, c // 2, h, 2 * w)
    d.node("Reshape", [x, d.ints([-1 if d.r.random() < 0.3 and i == 1 else v
                                  for i, v in enumerate(new)])], new)


def _slice(d: _Draw) -> None:
    x = d.pick(pred=lambda s: max(s[1:]) >= 2)
    if x is None:
        return
    s = d.shape[x]
    axis = d.r.choice([a for a in (1, 2, 3) if s[a] >= 2])
    start = d.r.randint(0, s[axis] - 1)
    end = d.r.randint(start + 1, s[axis])
    step = d.r.choice([1, 1, 2]) if end - start >= 2 else 1
    n = -(-(end - start) // step)
    ins = [x, d.ints([start]), d.ints([end]), d.ints([axis])] + ([d.ints([step])]
                                                                  if step != 1 else [])
    d.node("Slice", ins, (*s[:axis], n, *s[axis + 1:]))


def _split(d: _Draw) -> None:
    x = d.pick(pred=lambda s: s[1] >= 2)
    if x is None:
        return
    s = d.shape[x]
    a = d.r.randint(1, s[1] - 1)
    names = [d.b.fresh("split"), d.b.fresh("split")]
    d.b.nodes.append(helper.make_node("Split", [x, d.ints([a, s[1] - a])], names,
                                      name=names[0], axis=1))
    d.add(names[0], (1, a, *s[2:]))
    d.add(names[1], (1, s[1] - a, *s[2:]))


def _unsqueeze(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    s = d.shape[x]
    u = d.node("Unsqueeze", [x, d.ints([2])], (*s[:2], 1, *s[2:]))
    d.used.add(u)
    d.node("Squeeze", [u, d.ints([2])], s)


def _reduce_mean(d: _Draw) -> None:
    x = d.pick()
    assert x is not None
    s = d.shape[x]
    axes = d.r.choice([[2, 3], [1], [3]])
    d.node("ReduceMean", [x], tuple(1 if i in axes else n for i, n in enumerate(s)),
           axes=axes, keepdims=1)


def _passthrough(d: _Draw, op: str) -> None:
    x = d.pick()
    assert x is not None
    attrs: dict[str, object] = {"to": TensorProto.FLOAT} if op == "Cast" else {}
    ins = [x, x] if op == "CastLike" else [x]
    d.node(op, ins, d.shape[x], **attrs)


GENERATORS: dict[str, tuple[float, Callable[[_Draw], None]]] = {
    "Conv": (8.0, _conv),
    "ConvTranspose": (0.6, _conv_transpose),
    "MaxPool": (1.5, lambda d: _pool(d, "MaxPool")),
    "AveragePool": (1.0, lambda d: _pool(d, "AveragePool")),
    "GlobalAveragePool": (0.4, lambda d: _global_pool(d, "GlobalAveragePool")),
    "GlobalMaxPool": (0.3, lambda d: _global_pool(d, "GlobalMaxPool")),
    "Relu": (2.5, lambda d: _unary(d, "Relu")),
    "Sigmoid": (0.6, lambda d: _unary(d, "Sigmoid")),
    "Tanh": (0.5, lambda d: _unary(d, "Tanh")),
    "LeakyRelu": (0.5, lambda d: _unary(d, "LeakyRelu", alpha=0.1)),
    "Elu": (0.3, lambda d: _unary(d, "Elu")),
    "HardSigmoid": (0.3, lambda d: _unary(d, "HardSigmoid")),
    "HardSwish": (0.4, lambda d: _unary(d, "HardSwish")),
    "Neg": (0.2, lambda d: _unary(d, "Neg")),
    "Clip": (0.5, _clip),
    "PRelu": (0.4, _prelu),
    "Add": (1.5, lambda d: _binary(d, "Add")),
    "Sub": (0.5, lambda d: _binary(d, "Sub")),
    "Mul": (1.0, lambda d: _binary(d, "Mul")),
    "Div": (0.4, lambda d: _binary(d, "Div")),
    "Max": (0.3, lambda d: _binary(d, "Max")),
    "Min": (0.3, lambda d: _binary(d, "Min")),
    "Concat": (1.5, _concat),
    "Resize": (0.8, _resize),
    "Pad": (0.8, _pad),
    "BatchNormalization": (1.2, _batch_norm),
    "Flatten": (0.5, _flatten_gemm),
    "Gemm": (0.7, _gemm),
    "MatMul": (0.4, _matmul),
    "Softmax": (0.3, _softmax),
    "Transpose": (0.3, _transpose),
    "Reshape": (0.4, _reshape),
    "Slice": (0.6, _slice),
    "Split": (0.4, _split),
    "Unsqueeze": (0.2, _unsqueeze),
    "Squeeze": (0.05, _unsqueeze),
    "ReduceMean": (0.4, _reduce_mean),
    "Identity": (0.1, lambda d: _passthrough(d, "Identity")),
    "Dropout": (0.1, lambda d: _passthrough(d, "Dropout")),
    "Cast": (0.1, lambda d: _passthrough(d, "Cast")),
    "CastLike": (0.05, lambda d: _passthrough(d, "CastLike")),
}
"""ONNX operator -> (relative weight, drawer). SiLU and residual joins are drawn as
patterns on top (`PATTERNS`)."""

PATTERNS: dict[str, tuple[float, Callable[[_Draw], None]]] = {
    "silu": (0.8, _silu),
    "residual": (1.2, _residual),
}

NOT_GENERATED: dict[str, str] = {
    "Upsample": "deprecated since opset 10 (the generator writes opset 17); Resize covers it",
    "Swish": "an opset-24 operator onnxruntime 1.x does not run; SiLU is drawn as x*sigmoid(x)",
}
"""Supported operators the generator leaves out, with the reason."""


def _draw(seed: int) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    d = _Draw(seed)
    table = {**GENERATORS, **PATTERNS}
    names = list(table)
    weights = [table[n][0] for n in names]
    # a conv first: every network holds crossbar work most of the time
    if d.r.random() < 0.9:
        _conv(d)
    for _ in range(d.r.randint(2, 14)):
        table[d.r.choices(names, weights)[0]][1](d)
        if len(d.b.nodes) >= 25:
            break
    # outputs: the last value, plus now and then another dangling one
    last = d.order[-1]
    outs = [last]
    dangling = [n for n in d.order if n not in d.used and n != last and n not in d.inputs]
    if dangling and d.r.random() < 0.2:
        outs.append(d.r.choice(dangling))
    final = [d.b.node("Identity", [o], out=f"y{i}") for i, o in enumerate(outs)]
    graph = helper.make_graph(
        d.b.nodes, f"random{seed}",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v) for k, v in d.inputs.items()],
        [helper.make_tensor_value_info(f, TensorProto.FLOAT, d.shape[o])
         for f, o in zip(final, outs, strict=True)],
        d.b.weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    model.producer_name = "raptor-random-nets"
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    rng = np.random.default_rng(seed)
    inputs = {k: rng.standard_normal(v).astype(np.float32) for k, v in d.inputs.items()}
    return model, inputs


def onnxruntime_outputs(model: onnx.ModelProto, inputs: dict[str, np.ndarray]
                        ) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return [np.asarray(o) for o in sess.run(None, inputs)]


def random_net(seed: int) -> RandomNet:
    """Network `seed`: the first of sub-seeds seed*1000, seed*1000+1, ... that passes
    `onnx.checker` and runs in onnxruntime to finite outputs of the declared shapes."""
    for attempt in range(1000):
        sub = seed * 1000 + attempt
        try:
            model, inputs = _draw(sub)
            expected = onnxruntime_outputs(model, inputs)
        except Exception:
            continue
        declared = [tuple(d.dim_value for d in o.type.tensor_type.shape.dim)
                    for o in model.graph.output]
        if all(np.isfinite(e).all() for e in expected) and declared == [
                e.shape for e in expected]:
            ops = Counter(n.op_type for n in model.graph.node if not n.name.startswith("y"))
            return RandomNet(seed, model, inputs, expected, ops)
    raise RuntimeError(f"no valid network for seed {seed}")
