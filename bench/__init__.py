"""Benchmarks: `python -m bench` (what `make bench` runs)."""
