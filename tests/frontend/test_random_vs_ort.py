"""Random Conv / ConvTranspose / pooling configurations: plan semantics equal onnxruntime.

The ONNX backend cases cover each attribute alone; these cover their combinations
(groups with dilation and asymmetric pads, ceil_mode with pads and dilation, ...).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from raptor.frontend import FrontendError

from .util import check_against_ort, model, rand

SETTINGS = settings(max_examples=25, deadline=None, derandomize=True)


@st.composite
def conv_case(draw: st.DrawFn) -> tuple[dict[str, object], int, int, int]:
    group = draw(st.sampled_from([1, 2, 3]))
    k = draw(st.integers(1, 3))
    attrs: dict[str, object] = {
        "group": group,
        "strides": [draw(st.integers(1, 3)), draw(st.integers(1, 2))],
        "dilations": [draw(st.integers(1, 2)), draw(st.integers(1, 2))],
    }
    auto = draw(st.sampled_from(["NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    if auto == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, k)) for _ in range(4)]
    else:
        attrs["auto_pad"] = auto
        if auto != "VALID":  # onnxruntime rejects dilation with SAME padding
            attrs["dilations"] = [1, 1]
    return attrs, group, k, draw(st.integers(0, 1000))


@SETTINGS
@given(conv_case(), st.booleans())
def test_conv(case: tuple[dict[str, object], int, int, int], transpose: bool) -> None:
    attrs, group, k, seed = case
    cin, cout = 2 * group, group * (1 + seed % 2)
    if transpose:
        w_shape = [cin, cout // group, k, k]
        strides = attrs["strides"]
        assert isinstance(strides, list)
        if "auto_pad" not in attrs:
            attrs["output_padding"] = [seed % s for s in strides]
    else:
        w_shape = [cout, cin // group, k, k]
    weights = {"w": rand(*w_shape, seed=seed), "b": rand(cout, seed=1)}
    op = "ConvTranspose" if transpose else "Conv"
    proto = model(
        [helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)],
        {"x": [1, cin, 7, 6]},
        {"y": None},
        weights,
    )
    try:
        check_against_ort(proto, {"x": rand(1, cin, 7, 6, seed=seed + 1)})
    except FrontendError as error:  # SAME padding with kernel < stride is ill-defined
        assert transpose and "ambiguous" in str(error)


@SETTINGS
@given(
    st.sampled_from(["MaxPool", "AveragePool"]),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 2),
    st.integers(0, 1),
    st.integers(0, 1),
    st.integers(0, 10_000),
)
def test_pool(
    op: str, kh: int, stride: int, dilation: int, ceil: int, include_pad: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    kernel = [kh, int(rng.integers(1, 4))]
    attrs: dict[str, object] = {
        "kernel_shape": kernel,
        "strides": [stride, int(rng.integers(1, 3))],
        "dilations": [dilation, 1],
        "ceil_mode": ceil,
        "pads": [int(rng.integers(0, k)) for k in kernel * 2],
    }
    if op == "AveragePool":
        attrs["count_include_pad"] = include_pad
    proto = model(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        {"x": [1, 2, 7, 8]},
        {"y": None},
        opset=19,
    )
    check_against_ort(proto, {"x": rand(1, 2, 7, 8, seed=seed)})
