"""`raptor sweep`: design-space exploration over models × targets × modes × solver options,
each point a `raptor solve` run as a Dask task, with result tables and trade-off plots."""

from raptor.sweep.spec import Point, Sweep, SweepError, load_sweep

__all__ = ["Point", "Sweep", "SweepError", "load_sweep"]
