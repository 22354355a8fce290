"""Benchmark scripts; results are recorded in docs/benchmarks.md with their commands."""
