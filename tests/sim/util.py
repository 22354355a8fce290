"""Helpers for the simulator tests: parse a scheduled program with its weights and run it."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from raptor.ir.module import Module
from raptor.ir.parser import parse_module
from raptor.sim import SimOptions, SimResult, simulate
from raptor.target import Target

TARGET = Target()
"""1 GHz: one cycle is one ns, so hand-computed figures read directly in cycles."""

NO_QUEUE = SimOptions(shared_queueing=False)


def program(text: str, weights: Mapping[str, np.ndarray] | None = None) -> Module:
    module = parse_module(text, "t.spat")
    module.constants.update({k: np.asarray(v, np.float32) for k, v in (weights or {}).items()})
    return module


def run(text: str, weights: Mapping[str, np.ndarray] | None = None,
        inputs: Mapping[str | int, np.ndarray] | None = None,
        options: SimOptions | None = None, target: Target = TARGET) -> SimResult:
    return simulate(program(text, weights), target, inputs or {}, options)


def rand(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
