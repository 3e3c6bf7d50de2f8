"""Benchmarks of the `jbod-controller` and the `jbod-agent` (run `python -m bench.run_all` or `make bench`).

Benchmarks print figures; they are not tests and assert nothing about timing.
"""
