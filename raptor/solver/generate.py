"""Seeded random layered DAGs shaped like lowered networks, for tests and benchmarks.

Each layer holds graph batches; the lanes of a batch share cost and weight tiles (like the
output rows of one convolution). With ``symmetric=True`` dependencies connect whole batches,
so lanes of one batch have identical predecessor and successor sets (interchangeable lanes).
"""

from __future__ import annotations

import random

from raptor.solver.graph import ComputeGraph


def random_layered_dag(n_tasks: int, seed: int, *, width: int = 8, max_lanes: int = 4,
                       cost_range: tuple[int, int] = (100, 3000),
                       tiles_per_batch: tuple[int, int] = (0, 3),
                       bytes_range: tuple[int, int] = (8, 2048), max_preds: int = 3,
                       symmetric: bool = False) -> ComputeGraph:
    """About ``n_tasks`` tasks (exactly, the last batch is truncated) in layers of ~``width``."""
    rng = random.Random(seed)
    g = ComputeGraph()
    batches: list[list[int]] = []  # task ids per batch
    layers: list[list[int]] = []  # batch ids per layer
    next_tile = 0
    while g.num_tasks < n_tasks:
        layer: list[int] = []
        in_layer = 0
        while in_layer < width and g.num_tasks < n_tasks:
            lanes = min(rng.randint(1, max_lanes), n_tasks - g.num_tasks)
            cost = rng.randint(*cost_range)
            k = rng.randint(*tiles_per_batch)
            tiles = range(next_tile, next_tile + k)
            next_tile += k
            b = len(batches)
            ids = [g.add_task(f"b{b}.l{i}", cost, tiles, batch=b, lane=i) for i in range(lanes)]
            if layers:
                earlier = [x for lay in layers[-2:] for x in lay]
                if symmetric:
                    srcs = rng.sample(earlier, min(len(earlier), rng.randint(1, max_preds)))
                    nbytes = rng.randint(*bytes_range)
                    for sb in srcs:
                        for u in batches[sb]:
                            for v in ids:
                                g.add_edge(u, v, nbytes)
                else:
                    pool = [u for sb in earlier for u in batches[sb]]
                    for v in ids:
                        for u in rng.sample(pool, min(len(pool), rng.randint(1, max_preds))):
                            g.add_edge(u, v, rng.randint(*bytes_range))
            batches.append(ids)
            layer.append(b)
            in_layer += lanes
        layers.append(layer)
    return g.freeze()
