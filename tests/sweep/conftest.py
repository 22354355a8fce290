"""An in-process Dask cluster (threads, no worker processes: starts in a fraction of a
second) shared by the sweep tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from distributed import Client, LocalCluster

from raptor.sweep.point import CACHE
from raptor.sweep.runner import local_cluster


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with local_cluster(2, processes=False) as c:
        yield c


@pytest.fixture
def client(cluster: LocalCluster) -> Iterator[Client]:
    CACHE.clear()  # each test sees its own compilations (the workers share this process)
    with Client(cluster) as c:
        yield c

