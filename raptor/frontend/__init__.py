"""ONNX import into the plan graph, and its numpy reference semantics."""

from raptor.frontend.errors import FrontendError
from raptor.frontend.onnx_import import SUPPORTED_OPS, import_onnx
from raptor.frontend.plan import KINDS, Plan, PlanGraph, PlanValue
from raptor.frontend.reference import run_plan, run_plan_graph

__all__ = [
    "KINDS",
    "SUPPORTED_OPS",
    "FrontendError",
    "Plan",
    "PlanGraph",
    "PlanValue",
    "import_onnx",
    "run_plan",
    "run_plan_graph",
]
