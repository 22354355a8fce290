"""An in-process Dask cluster (threads, no worker processes: starts in a fraction of a
second) shared by the sweep tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from raptor.sweep.point import CACHE


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                      dashboard_address=":0") as c:
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    CACHE.clear()  # each test sees its own compilations (the workers share this process)
    with Client(cluster) as c:
        yield c

