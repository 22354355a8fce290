"""Shared helpers: compile an example model through the graph passes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from raptor.driver import Compiled, CompileOptions, compile_model
from raptor.target import Target, load_target

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
MODELS = ["mlp", "lenet", "resnet_block", "mobilenet_block", "yolo_neck"]


@pytest.fixture(scope="session")
def target() -> Target:
    return load_target("default")


def compiled(name: str, target: Target, selector: str = "exact") -> Compiled:
    return compile_model(EXAMPLES / f"{name}.onnx", target,
                         CompileOptions(layout_selector=selector))


def sample(name: str) -> dict[str, np.ndarray]:
    with np.load(EXAMPLES / f"{name}.npz") as f:
        return {k: np.asarray(f[k]) for k in f.files}
