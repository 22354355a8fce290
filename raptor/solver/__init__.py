"""Scheduling: ComputeGraph, the communication model (``comm``), evaluation and validation,
PEFT/EFT list scheduling, CP-SAT."""

from raptor.solver.comm import Replay, replay
from raptor.solver.cpsat import CpSatOptions, cpsat_schedule
from raptor.solver.evaluate import (
    LowerBounds,
    ScheduleEvaluation,
    evaluate_schedule,
    lower_bounds,
    validate_schedule,
)
from raptor.solver.gantt import gantt_svg
from raptor.solver.graph import ComputeGraph, Edge, GraphError, Task
from raptor.solver.peft import CapacityError, eft_schedule, pack_tiles, peft_schedule
from raptor.solver.schedule import EquivalenceClass, MergeScheduleResult

__all__ = ["CapacityError", "ComputeGraph", "CpSatOptions", "Edge", "EquivalenceClass",
           "GraphError", "LowerBounds", "MergeScheduleResult", "Replay", "ScheduleEvaluation",
           "Task", "cpsat_schedule", "eft_schedule", "evaluate_schedule", "gantt_svg",
           "lower_bounds", "pack_tiles", "peft_schedule", "replay", "validate_schedule"]
