"""Standard CNN architectures we did not write: torchvision's model definitions exported to
ONNX with ``torch.onnx.export``, for the pipeline benchmarks (``bench_stream --cnns``).

No weights can be downloaded here, so every net has torchvision's own random
initialization under a fixed seed (``torch.manual_seed``) with its batch-norm statistics
randomized too (else they fold to identities); the architecture, the operators the
exporter emits and the crossbar footprint are those of the published nets. Inputs are
64 × 64 px: the weights fit the default target's 64 × 64 crossbars at any size, but the
tasks, and so the solve time, grow with the pixels.

Torch is a benchmark-only dependency (a CUDA build of several GB from PyPI by default), so
the export runs in any interpreter that has it, e.g. a venv of its own, and writes the cache
that ``bench_stream`` reads; the .onnx files are not committed:

    python -m venv /tmp/tv && /tmp/tv/bin/pip install torch==2.14.1 torchvision==0.29.1 onnx
    /tmp/tv/bin/python -m benchmarks.torchvision_cnns [--cache DIR] [NAME ...]
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class TorchvisionNet:
    name: str  # torchvision.models builder, also the cached file's stem
    size: int  # input height = width, pixels

    @property
    def label(self) -> str:
        """The benchmark rows' name: the architecture at its input size (`resnet18-64`,
        not ResNet-18 at 224, which `bench_stream --resnet` names `resnet18`)."""
        return f"{self.name}-{self.size}"

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (1, 3, self.size, self.size)


NETS = (
    TorchvisionNet("squeezenet1_1", 64),
    TorchvisionNet("mobilenet_v2", 64),
    TorchvisionNet("mobilenet_v3_small", 64),
    TorchvisionNet("shufflenet_v2_x0_5", 64),
    TorchvisionNet("mnasnet0_5", 64),
    TorchvisionNet("resnet18", 64),
    TorchvisionNet("regnet_x_400mf", 64),
    TorchvisionNet("efficientnet_b0", 64),
)
"""The nets: at 64 px the last stage of the /32 downsampling ones is still 2 × 2."""


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "raptor" / "torchvision"


def cached(cache: Path | None = None) -> list[tuple[TorchvisionNet, Path]]:
    """The nets whose export is in the cache (``bench_stream`` needs no torch)."""
    folder = cache or default_cache()
    return [(net, folder / f"{net.name}.onnx") for net in NETS
            if (folder / f"{net.name}.onnx").exists()]


def export(net: TorchvisionNet, cache: Path, seed: int = 0) -> Path:
    """Build the net with seeded random weights and batch-norm statistics and export it."""
    import torch
    import torchvision

    torch.manual_seed(seed)
    model = getattr(torchvision.models, net.name)(weights=None)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    model.eval()
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / f"{net.name}.onnx"
    torch.onnx.export(model, (torch.randn(net.shape),), str(target), dynamo=False,
                      input_names=["input"], output_names=["logits"], opset_version=17)
    return target


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help=f"nets (default all: "
                    f"{', '.join(n.name for n in NETS)})")
    ap.add_argument("--cache", type=Path, default=default_cache())
    args = ap.parse_args(argv)
    for net in NETS:
        if not args.names or net.name in args.names:
            print(export(net, args.cache), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
