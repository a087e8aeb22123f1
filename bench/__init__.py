"""Benchmarks: ``python -m bench`` runs every ``bench/bench_*.py`` module's ``run()`` and prints its table.

Benchmarks are not timed tests (CI never runs them): they measure throughput on the machine at
hand, and the numbers quoted in LOG.md come from their printed tables.
"""
