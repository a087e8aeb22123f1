"""Benchmarks: ``python -m bench`` runs every ``bench/bench_*.py`` module's ``run()`` and prints its table.

Benchmarks are not timed tests (CI never runs them): they measure throughput on the machine at
hand, and the numbers quoted in LOG.md come from their printed tables.
"""

import time as _time

import numpy as _np


def best_of(fn, repeats: int):
    """``(best wall s, process CPU s of that call, its result)`` over ``repeats`` calls of ``fn()``: the best
    wall time is the least disturbed by other processes; its CPU time says what the call itself cost."""
    best = (_np.inf, _np.inf, None)
    for _ in range(repeats):
        t0, c0 = _time.perf_counter(), _time.process_time()
        out = fn()
        dt, dc = _time.perf_counter() - t0, _time.process_time() - c0
        if dt < best[0]:
            best = (dt, dc, out)
    return best
