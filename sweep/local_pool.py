"""The local backend of :func:`sweep.engine.run_sweep`: one reused ``spawn`` worker pool per driver process.

Workers are started once and kept (starting one costs seconds: an interpreter, the imports, the compiled
kernels), replaced when anything they fixed at spawn changes (:func:`_pool_key`), stopped before a fork
and at exit; a sweep whose worker died is retried once on fresh workers (:func:`run_local`).
"""
from __future__ import annotations

import atexit
import os
import sys

from sweep.compute import compute_cell

#: The local backend's worker pool, kept for the life of the driver process: starting spawn workers
#: (interpreter, imports, loading compiled kernels) costs seconds per worker, once per process instead
#: of once per sweep (a protocol run is 15 sweeps). Keyed by everything the workers fixed when they
#: were spawned or first imported the cell code (see :func:`_pool_key`).
_POOL: dict = {}


def _pool_key(n: int, version: str) -> tuple:
    """What a reused worker must share with the driver (the pid, ``key[2]``, also says who owns the pool): the worker count; the code ``version`` (a worker
    keeps the modules it imported, so edited cell code needs fresh workers); the environment, working
    directory and ``sys.path`` it inherited at spawn; and the driver's pid (a forked child inherits
    ``_POOL`` but not the pool's manager thread)."""
    return n, version, os.getpid(), os.getcwd(), tuple(sys.path), tuple(sorted(os.environ.items()))


def _local_pool(n: int, version: str):
    """The reused ``spawn`` pool of ``n`` workers (a new one if the key changed or a worker died)."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    key = _pool_key(n, version)
    pool = _POOL.get("pool")
    if pool is not None and (_POOL.get("key") != key or getattr(pool, "_broken", False)):
        shutdown_local_pool(wait=_POOL["key"][2] == os.getpid())
        pool = None
    if pool is None:
        # spawn, not fork: the driver may hold threads (tqdm, torch, Numba's pool) that fork would copy
        # in a locked state; workers re-import the cell function from its module.
        pool = ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("spawn"))
        _POOL.update(pool=pool, key=key)
        if _POOL.get("finalizer_pid") != os.getpid():
            # a multiprocessing child exits through multiprocessing's exit function, not atexit, and that
            # joins its children first: stop the workers before, or the child would wait for them forever
            from multiprocessing import util as mp_util

            mp_util.Finalize(None, shutdown_local_pool, exitpriority=100)
            _POOL["finalizer_pid"] = os.getpid()
    return pool


def shutdown_local_pool(wait: bool = True) -> None:
    """Stop the local backend's reused workers (also done at interpreter exit)."""
    pool = _POOL.pop("pool", None)
    key = _POOL.pop("key", None)
    if pool is not None and key[2] == os.getpid():  # a forked child must not touch its parent's workers
        pool.shutdown(wait=wait, cancel_futures=True)


atexit.register(shutdown_local_pool)
# A fork copies the pool's record but not its threads, and may copy their locks held: stop the workers
# before any os.fork() (multiprocessing's fork context) so that parent and child each start afresh.
# subprocess does not fork this way and keeps the pool.
os.register_at_fork(before=shutdown_local_pool)


def _submit_all(pool, fn_ref, cells) -> dict:
    return {pool.submit(compute_cell, fn_ref, c.settings): c for c in cells}


def run_local(fn_ref, todo, n_workers, finish, failures, version: str, *, retry_broken: bool = True) -> None:
    from concurrent.futures import FIRST_COMPLETED, wait
    from concurrent.futures.process import BrokenProcessPool

    n = int(n_workers or os.cpu_count() or 1)
    pending, lost = {}, []
    try:
        try:
            pending = _submit_all(_local_pool(n, version), fn_ref, todo)
        except BrokenProcessPool:  # the reused pool broke before this sweep: fresh workers, not the retry
            shutdown_local_pool(wait=False)
            pending = _submit_all(_local_pool(n, version), fn_ref, todo)
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in done:
                c = pending.pop(fut)
                try:
                    table, seconds = fut.result()
                except BrokenProcessPool:
                    lost.append(c)  # a worker died while this sweep ran
                    continue
                except Exception as exc:  # noqa: BLE001
                    failures[c.id] = f"{type(exc).__name__}: {exc}"
                    continue
                finish(c, table, seconds)
    except BaseException:
        # Ctrl-C: drop queued cells now (finished ones are already stored) and stop the workers
        for fut in pending:
            fut.cancel()
        shutdown_local_pool()
        raise
    if lost:
        shutdown_local_pool(wait=False)
        if retry_broken:  # once, on fresh workers; a cell that kills its worker again is reported
            run_local(fn_ref, lost, n_workers, finish, failures, version, retry_broken=False)
        else:
            for c in lost:
                failures[c.id] = "BrokenProcessPool: a worker process died while computing this cell"
