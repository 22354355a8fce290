"""ONNX's own backend node cases: import + reference executor must match the expected outputs.

Every case is either computed correctly (rtol 1e-3, as the ONNX backend suite requires) or
listed in UNSUPPORTED and rejected with a one-line FrontendError naming the reason.
"""

from __future__ import annotations

from fnmatch import fnmatch

import numpy as np
import pytest
from onnx_cases import OnnxCase, node_cases

from raptor.frontend import FrontendError, import_onnx, run_plan_graph

#: case-name pattern -> text the FrontendError must contain (that text is the reason)
UNSUPPORTED: dict[str, str] = {
    # The PIM datapath is float32: integer and boolean tensors are rejected at the inputs.
    "test_*_int8*": "element type INT8",
    "test_*_int16": "element type INT16",
    "test_*_uint8": "element type UINT8",
    "test_*_uint16": "element type UINT16",
    "test_*_uint32": "element type UINT32",
    "test_*_uint64": "element type UINT64",
    "test_*_int32*": "element type INT32",
    "test_*_int64": "element type INT64",
    "test_*_float16": "element type FLOAT16",
    "test_*_float64": "element type DOUBLE",
    # (tests/frontend/test_ops.py runs float32 copies of these integer padding cases)
    "test_edge_pad": "element type INT32",
    "test_reflect_pad": "element type INT32",
    "test_wrap_pad": "element type INT32",
    "test_identity_sequence": "is not a tensor",
    "test_identity_opt": "is not a tensor",
    # Only 1-D and 2-D convolutions and pools map onto the crossbars.
    "test_averagepool_3d_*": "3-D spatial input",
    "test_maxpool_3d_*": "3-D spatial input",
    "test_convtranspose_3d": "3-D spatial input",
    # Inference only: training-mode statistics, random dropout, its boolean mask.
    "test_batchnorm_*_training_mode": "training mode",
    "test_training_dropout": "training_mode=true",
    "test_training_dropout_default": "training_mode=true",
    "test_training_dropout_zero_ratio": "training_mode=true",
    "test_training_dropout_*mask": "graph output 'z' has element type BOOL",
    "test_dropout_default_mask*": "graph output 'z' has element type BOOL",
    "test_maxpool_with_argmax_*": "graph output 'z' has element type INT64",
    # ReduceMean is supported as the spatial (H, W) mean only.
    "test_reduce_mean_*": "only the spatial mean over H and W",
    # Resize is nearest-neighbour only (interpolation has no PIM mapping).
    "test_resize_*linear*": "mode='linear'",
    "test_resize_*cubic*": "mode='cubic'",
    "test_resize_tf_crop_and_resize*": "mode='linear'",
    # Zero-size tensors have nothing to compute.
    "test_reshape_allowzero_reordered": "zero-size",
    "test_split_zero_size_splits_*": "zero-size",
    "test_slice_start_out_of_bounds": "zero-size",
    # Function expansions that use operators outside the supported set.
    **{
        f"test_clip{variant}_expanded": "unsupported operator Less"
        for variant in (
            "",
            "_example",
            "_inbounds",
            "_outbounds",
            "_splitbounds",
            "_min_greater_than_max",
            "_default_min",
            "_default_max",
        )
    },
    "test_leakyrelu*_expanded": "unsupported operator Less",
    "test_elu*_expanded_ver18": "unsupported operator Less",
    "test_prelu_*_expanded": "unsupported operator Less",
    "test_softmax_*_expanded*": "unsupported operator ReduceMax",
}

CASES = node_cases()


def _reason(name: str) -> str | None:
    return next((why for pattern, why in UNSUPPORTED.items() if fnmatch(name, pattern)), None)


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_backend_case(case: OnnxCase) -> None:
    reason = _reason(case.name)
    if reason is not None:
        with pytest.raises(FrontendError) as error:
            import_onnx(case.model)
        message = str(error.value)
        assert reason in message and "\n" not in message, message
        return
    graph = import_onnx(case.model)
    outputs = run_plan_graph(graph, case.inputs)
    for name, expected in case.outputs.items():
        assert outputs[name].shape == expected.shape, name
        np.testing.assert_allclose(outputs[name], expected, rtol=1e-3, atol=1e-7, err_msg=name)


def test_unsupported_list_is_current() -> None:
    """Each pattern still names a case, and most cases are supported."""
    names = [case.name for case in CASES]
    for pattern in UNSUPPORTED:
        assert any(fnmatch(name, pattern) for name in names), pattern
    supported = [name for name in names if _reason(name) is None]
    assert len(supported) >= 190, len(supported)
    for op in ("Conv", "ConvTranspose", "MaxPool", "AveragePool", "Resize", "Gemm", "Split"):
        assert any(case.op == op and _reason(case.name) is None for case in CASES), op
