"""Repository root on sys.path for the tests that use `benchmarks.models` (plain `pytest`
works as well as `python -m pytest`)."""
