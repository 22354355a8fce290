"""Pipeline mode: stage partitioning for a stream of inferences (docs/pipeline.md).

Groups of the ComputeGraph form a chain; contiguous stages get core budgets; each stage's
instances are packed onto its cores under crossbar capacity, optionally replicating a
bottleneck group's tiles; stage boundaries go through serialized shared memory. Three
solvers share one period model and one realization: the scheduling spec's heuristic
(:func:`heuristic_pipeline`), an exact DP (:func:`dp_pipeline`) and CP-SAT
(:func:`cpsat_pipeline`).
"""

from raptor.solver.pipeline.cpsat_model import CpSatPipelineOptions
from raptor.solver.pipeline.model import Partition, evaluate_partition
from raptor.solver.pipeline.problem import PipelineCapacityError, PipelineProblem, build_problem
from raptor.solver.pipeline.result import PipelineResult, StageInfo, validate_pipeline
from raptor.solver.pipeline.solve import (
    cone_stream,
    cpsat_pipeline,
    dp_pipeline,
    follow_producers,
    heuristic_pipeline,
    latency_stream,
    layered_stream,
    spread_stream,
)

__all__ = ["CpSatPipelineOptions", "Partition", "PipelineCapacityError", "PipelineProblem",
           "PipelineResult", "StageInfo", "build_problem", "cone_stream", "cpsat_pipeline",
           "dp_pipeline", "evaluate_partition", "follow_producers", "heuristic_pipeline",
           "latency_stream", "layered_stream", "spread_stream", "validate_pipeline"]
