"""Export one tiny CNN with both torch exporters (optional: needs torch, and onnxscript for dynamo).

``python examples/export_torch.py`` writes ``examples/torch_cnn_torchscript.onnx`` (opset 17)
and ``examples/torch_cnn_dynamo.onnx`` (opset 18) with a shared ``examples/torch_cnn.npz``.
The two exporters spell the same network differently (Flatten vs Reshape, GlobalAveragePool
vs ReduceMean), which is exactly what the frontend must absorb. Torch is not a dependency of
Raptor; without it this script says so and exits.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> int:
    if importlib.util.find_spec("torch") is None:
        print("torch is not installed; skipping the torch export examples")
        return 0
    import torch
    from torch import nn

    class TinyCnn(nn.Module):
        """Conv-BN-ReLU, a channel split, SiLU, nearest upsample, pooling and a classifier."""

        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
            self.left = nn.Conv2d(8, 8, 3, padding=1)
            self.right = nn.Sequential(nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.SiLU())
            self.up = nn.Upsample(scale_factor=2.0, mode="nearest")
            self.pool = nn.MaxPool2d(2)
            self.head = nn.Linear(16, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            a, b = torch.chunk(self.stem(x), 2, dim=1)
            y = torch.cat([self.left(a), self.up(self.right(b))], dim=1)
            y = nn.functional.adaptive_avg_pool2d(self.pool(y), 1)
            return self.head(torch.flatten(y, 1))

    torch.manual_seed(0)
    net = TinyCnn().eval()
    with torch.no_grad():  # non-trivial BatchNorm statistics, so folding is visible
        net.stem[1].running_mean.uniform_(-0.5, 0.5)
        net.stem[1].running_var.uniform_(0.5, 1.5)
    x = torch.randn(1, 3, 16, 16)
    np.savez(HERE / "torch_cnn.npz", x=x.numpy())
    torch.onnx.export(
        net,
        (x,),
        str(HERE / "torch_cnn_torchscript.onnx"),
        dynamo=False,
        opset_version=17,
        input_names=["x"],
        output_names=["logits"],
        dynamic_axes={"x": {0: "batch"}},
    )
    print("wrote examples/torch_cnn_torchscript.onnx")
    if importlib.util.find_spec("onnxscript") is None:
        print("onnxscript is not installed; skipping the dynamo export")
        return 0
    program = torch.onnx.export(
        net,
        (x,),
        dynamo=True,
        opset_version=18,
        input_names=["x"],
        output_names=["logits"],
        dynamic_shapes={"x": {0: torch.export.Dim("batch", max=64)}},
    )
    assert program is not None
    program.save(str(HERE / "torch_cnn_dynamo.onnx"))
    print("wrote examples/torch_cnn_dynamo.onnx")
    return 0


if __name__ == "__main__":
    sys.exit(main())
