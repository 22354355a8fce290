"""Exact numpy semantics of every plan kind, to check the import against onnxruntime.

Products and sums accumulate in float64 and round once to float32, so this is the most
accurate result a float32 implementation can be compared with.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

import numpy as np

from raptor.frontend.plan import Plan, PlanGraph
from raptor.frontend.shapes import nearest_indices, pool_out

__all__ = ["run_plan", "run_plan_graph"]

Array = np.ndarray
_Impl = Callable[[Plan, list[Array]], list[Array]]


def _f32(x: Array) -> Array:
    return np.asarray(x, dtype=np.float32)


def _pad_hw(x: Array, pads: list[int], fill: float) -> Array:
    top, left, bottom, right = pads
    return np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)


def _taps(offset: int, stride: int, count: int) -> slice:
    """``count`` positions from ``offset``, ``stride`` apart."""
    return slice(offset, offset + stride * (count - 1) + 1, stride)


def _with_bias(plan: Plan, y: Array) -> Array:
    """y (N, C, H, W) plus the optional per-channel bias, as float32."""
    if "bias" in plan.weights:
        y = y + plan.weights["bias"].astype(np.float64).reshape(1, -1, 1, 1)
    return _f32(y)


def _conv(plan: Plan, xs: list[Array]) -> list[Array]:
    (x,) = xs
    w = plan.weights["weight"].astype(np.float64)
    (sh, sw), (dh, dw) = plan.ints("strides"), plan.ints("dilations")
    g = int(plan.num("group"))
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    xp = _pad_hw(x.astype(np.float64), plan.ints("pads"), 0.0)
    oh = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    ow = (xp.shape[3] - (kw - 1) * dw - 1) // sw + 1
    xg = xp.reshape(n, g, c // g, *xp.shape[2:])
    wg = w.reshape(g, o // g, cg, kh, kw)
    y = np.zeros((n, g, o // g, oh, ow))
    for i, j in itertools.product(range(kh), range(kw)):
        patch = xg[..., _taps(i * dh, sh, oh), _taps(j * dw, sw, ow)]
        y += np.einsum("ngchw,goc->ngohw", patch, wg[..., i, j])
    return [_with_bias(plan, y.reshape(n, o, oh, ow))]


def _conv_transpose(plan: Plan, xs: list[Array]) -> list[Array]:
    (x,) = xs
    w = plan.weights["weight"].astype(np.float64)
    (sh, sw), (dh, dw) = plan.ints("strides"), plan.ints("dilations")
    top, left, bottom, right = plan.ints("pads")
    oph, opw = plan.ints("output_padding")
    g = int(plan.num("group"))
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    full_h = sh * (h - 1) + (kh - 1) * dh + 1 + oph
    full_w = sw * (wd - 1) + (kw - 1) * dw + 1 + opw
    xg = x.astype(np.float64).reshape(n, g, c // g, h, wd)
    wg = w.reshape(g, c // g, og, kh, kw)
    full = np.zeros((n, g, og, full_h, full_w))
    for i, j in itertools.product(range(kh), range(kw)):
        full[..., _taps(i * dh, sh, h), _taps(j * dw, sw, wd)] += np.einsum(
            "ngchw,gco->ngohw", xg, wg[..., i, j])
    y = full.reshape(n, g * og, full_h, full_w)[:, :, top : full_h - bottom, left : full_w - right]
    return [_with_bias(plan, y)]


def _windows(x: Array, plan: Plan, fill: float) -> tuple[list[Array], tuple[int, int]]:
    """Every kernel offset's strided view of x padded with fill (also past ceil_mode's edge)."""
    (kh, kw), (sh, sw) = plan.ints("kernel"), plan.ints("strides")
    dh, dw = plan.ints("dilations")
    top, left, bottom, right = plan.ints("pads")
    ceil = bool(plan.attrs["ceil_mode"])
    h, w = x.shape[2:]
    oh = pool_out(h, kh, sh, (top, bottom), dh, ceil)
    ow = pool_out(w, kw, sw, (left, right), dw, ceil)
    need_h = (oh - 1) * sh + (kh - 1) * dh + 1
    need_w = (ow - 1) * sw + (kw - 1) * dw + 1
    xp = _pad_hw(x, [top, left, max(need_h - h - top, 0), max(need_w - w - left, 0)], fill)
    views = [xp[:, :, _taps(i * dh, sh, oh), _taps(j * dw, sw, ow)]
             for i, j in itertools.product(range(kh), range(kw))]
    return views, (oh, ow)


def _window_counts(out: int, kernel: int, stride: int, dilation: int, begin: int, low: int,
                   high: int) -> Array:
    """How many cells of each window along one axis fall inside [low, high)."""
    cells = np.arange(out)[:, None] * stride - begin + np.arange(kernel)[None, :] * dilation
    return ((cells >= low) & (cells < high)).sum(axis=1)


def _avgpool(plan: Plan, xs: list[Array]) -> list[Array]:
    views, outs = _windows(xs[0].astype(np.float64), plan, 0.0)
    pads = plan.ints("pads")
    # Explicit padding counts when count_include_pad; the cells ceil_mode adds never do.
    include = bool(plan.attrs["count_include_pad"])
    rows, cols = (
        _window_counts(out, k, s, d, lo, -lo if include else 0, size + hi if include else size)
        for out, size, k, s, d, lo, hi in zip(outs, xs[0].shape[2:], plan.ints("kernel"),
                                              plan.ints("strides"), plan.ints("dilations"),
                                              pads[:2], pads[2:], strict=True))
    return [_f32(np.add.reduce(views) / np.outer(rows, cols))]


def _resize_nearest(plan: Plan, xs: list[Array]) -> list[Array]:
    (x,) = xs
    scales = plan.attrs["scales"]
    assert isinstance(scales, list)
    modes = str(plan.attrs["coordinate_transformation_mode"]), str(plan.attrs["nearest_mode"])
    rows, cols = (nearest_indices(size, out, float(scale), *modes) for size, out, scale in zip(
        x.shape[2:], plan.ints("sizes"), scales, strict=True))
    return [x[:, :, rows[:, None], cols[None, :]]]


def _gemm(plan: Plan, xs: list[Array]) -> list[Array]:
    y = xs[0].astype(np.float64) @ plan.weights["weight"].astype(np.float64)
    if "bias" in plan.weights:
        y = y + plan.weights["bias"]
    return [_f32(y)]


def _matmul(plan: Plan, xs: list[Array]) -> list[Array]:
    b = xs[1] if len(xs) == 2 else plan.weights["weight"]
    return [_f32(np.matmul(xs[0].astype(np.float64), b.astype(np.float64)))]


def _binary(op: Callable[[Array, Array], Array]) -> _Impl:
    def run(plan: Plan, xs: list[Array]) -> list[Array]:
        if len(xs) == 1:
            operand = plan.weights["operand"]
            xs = [operand, xs[0]] if plan.attrs["operand_index"] == 0 else [xs[0], operand]
        return [_f32(op(*xs))]

    return run


def _unary(fn: Callable[[Plan, Array], Array]) -> _Impl:
    return lambda plan, xs: [_f32(fn(plan, xs[0]))]


def _channel(x: Array, v: Array) -> Array:
    """v (C,) shaped to broadcast along axis 1 of x."""
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def _sigmoid(x: Array) -> Array:
    return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def _hard_sigmoid(x: Array, alpha: float, beta: float) -> Array:
    return np.clip(alpha * x.astype(np.float64) + beta, 0.0, 1.0)


def _softmax(plan: Plan, x: Array) -> Array:
    axis = int(plan.num("axis"))
    z = x.astype(np.float64)
    z = np.exp(z - z.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def _slice(plan: Plan, x: Array) -> Array:
    return x[tuple(slice(start, None if end < 0 else end, step) for start, end, step in zip(
        plan.ints("starts"), plan.ints("ends"), plan.ints("steps"), strict=True))]


def _pad(plan: Plan, x: Array) -> Array:
    """Negative pads crop first; the rest pads numpy's way (its modes are ONNX's)."""
    pads = plan.ints("pads")
    rank = x.ndim
    begin, end = pads[:rank], pads[rank:]
    x = x[tuple(slice(max(-lo, 0), d - max(-hi, 0)) for d, lo, hi in zip(x.shape, begin, end,
                                                                         strict=True))]
    widths = [(max(lo, 0), max(hi, 0)) for lo, hi in zip(begin, end, strict=True)]
    mode = str(plan.attrs["mode"])
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=plan.num("value"))
    return np.pad(x, widths, mode=mode)  # type: ignore[call-overload]


_IMPLS: dict[str, _Impl] = {
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "gemm": _gemm,
    "matmul": _matmul,
    "relu": _unary(lambda p, x: np.maximum(x, 0)),
    "leaky_relu": _unary(lambda p, x: np.where(x >= 0, x, x * np.float32(p.num("alpha")))),
    "prelu": _unary(lambda p, x: np.where(x >= 0, x, x * p.weights["slope"])),
    "clip": _unary(lambda p, x: np.minimum(np.maximum(x, p.num("min")), p.num("max"))),
    "sigmoid": _unary(lambda p, x: _sigmoid(x)),
    "hard_sigmoid": _unary(lambda p, x: _hard_sigmoid(x, p.num("alpha"), p.num("beta"))),
    "hard_swish": _unary(lambda p, x: x * _hard_sigmoid(x, 1.0 / 6.0, 0.5)),
    "tanh": _unary(lambda p, x: np.tanh(x.astype(np.float64))),
    "silu": _unary(lambda p, x: x * _sigmoid(x)),
    **{kind: _binary(op) for kind, op in (("add", np.add), ("sub", np.subtract),
                                          ("mul", np.multiply), ("div", np.divide),
                                          ("max", np.maximum), ("min", np.minimum))},
    "neg": _unary(lambda p, x: np.negative(x)),
    "elu": _unary(lambda p, x: np.where(x > 0, x, p.num("alpha") * np.expm1(
        np.minimum(x, 0).astype(np.float64)))),
    "pad": _unary(_pad),
    "bias_add": _unary(lambda p, x: x + _channel(x, p.weights["bias"])),
    "affine_channel": _unary(
        lambda p, x: x * _channel(x, p.weights["scale"]) + _channel(x, p.weights["shift"])),
    "maxpool": lambda p, xs: [_f32(np.maximum.reduce(_windows(xs[0], p, -np.inf)[0]))],
    "avgpool": _avgpool,
    "global_avgpool": _unary(lambda p, x: x.astype(np.float64).mean(axis=(2, 3), keepdims=True)),
    "resize_nearest": _resize_nearest,
    "concat": lambda p, xs: [np.concatenate(xs, axis=int(p.num("axis")))],
    "split": lambda p, xs: list(np.split(xs[0], np.cumsum(p.ints("sizes"))[:-1],
                                         axis=int(p.num("axis")))),
    "slice": _unary(_slice),
    "flatten": _unary(lambda p, x: x.reshape(int(np.prod(x.shape[: int(p.num("axis"))])), -1)),
    "reshape": _unary(lambda p, x: x.reshape(p.ints("shape"))),
    "transpose": _unary(lambda p, x: np.transpose(x, p.ints("perm"))),
    "softmax": _unary(_softmax),
    "identity": _unary(lambda p, x: x.copy()),
}


def run_plan(plan: Plan, inputs: list[Array]) -> list[Array]:
    """Run one plan on float32 arrays; returns one float32 array per output."""
    return _IMPLS[plan.kind](plan, inputs)


def run_plan_graph(graph: PlanGraph, inputs: Mapping[str, Array]) -> dict[str, Array]:
    """Run the whole graph; inputs are keyed by graph input name, outputs by output name."""
    env: dict[str, Array] = {}
    for value in graph.inputs:
        if value.name not in inputs:
            raise KeyError(f"missing graph input {value.name!r}")
        array = np.asarray(inputs[value.name], dtype=np.float32)
        if array.shape != value.shape:
            raise ValueError(f"input {value.name!r} has shape {list(array.shape)}, expected "
                             f"{list(value.shape)}")
        env[value.name] = array
    for plan in graph.plans:
        env.update(zip(plan.outputs, run_plan(plan, [env[n] for n in plan.inputs]), strict=True))
    return {value.name: env[value.name] for value in graph.outputs}
