"""The Dask backend: connect (short timeout, one-line error), orphan-proof local clusters, run cells.

Workers only compute; the driver stores each result (:func:`sweep.engine.run_sweep`), so a worker
killed mid-cell just makes Dask recompute that cell elsewhere and the cell is still stored once.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

#: Seconds to wait for a ``--scheduler`` address before giving up with one clear line.
CONNECT_TIMEOUT_S = 5.0
#: Imported in every worker process of a cluster we start: a worker exits when its parent does.
#: (Not a nanny preload: a ``LocalCluster``'s nannies live in the driver process itself, which must
#: keep running when *its* parent goes, e.g. under ``nohup``.)
_GUARD = "sweep._parent_guard"


def _distributed():
    try:
        import distributed
    except ImportError:  # pragma: no cover — depends on the install
        raise ValueError("the dask backend needs the 'dask' extra: pip install 'asyncgrpo[dask]'") from None
    return distributed


def local_cluster(n_workers: int = 2, **kwargs):
    """A ``distributed.LocalCluster`` of ``n_workers`` single-threaded worker processes that exit
    when the driver dies, even by SIGKILL (no orphan processes)."""
    distributed = _distributed()
    opts = {"threads_per_worker": 1, "processes": True, "dashboard_address": None, "silence_logs": 40,
            "preload": [_GUARD], **kwargs}
    return distributed.LocalCluster(n_workers=int(n_workers), **opts)


def connect(scheduler: str, timeout_s: float = CONNECT_TIMEOUT_S):
    """A ``distributed.Client`` on ``scheduler``; ``ValueError`` (one line) if unreachable within ``timeout_s``."""
    distributed = _distributed()
    try:
        return distributed.Client(scheduler, timeout=f"{float(timeout_s)}s")
    except (OSError, TimeoutError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ValueError(
            f"cannot reach the Dask scheduler at {scheduler!r} within {timeout_s:g} s: {first}"
        ) from None


@contextlib.contextmanager
def dask_client(scheduler: str | None = None, n_local: int | None = None) -> Iterator:
    """A client on ``scheduler``, or on a :func:`local_cluster` of ``n_local`` processes; closed on exit."""
    with contextlib.ExitStack() as stack:
        if scheduler is not None:
            client = stack.enter_context(connect(scheduler))
        else:
            cluster = stack.enter_context(local_cluster(int(n_local or 2)))
            client = stack.enter_context(_distributed().Client(cluster))
        yield client


def run_dask(sweep, todo, keys, finish, failures, *, client, scheduler, n_local) -> None:
    """Submit every cell of ``todo``; ``finish`` (the driver's store step) runs as results arrive."""
    from sweep.compute import compute_cell

    distributed = _distributed()
    with contextlib.ExitStack() as stack:
        if client is None:
            client = stack.enter_context(dask_client(scheduler, n_local))
        by_key = {}
        futures = []
        for c in todo:
            # pure=False plus a unique key: Dask must not merge or skip cells on its own; caching is ours.
            fut = client.submit(compute_cell, sweep.fn, c.settings, key=f"cell-{sweep.id}-{keys[c.id]}", pure=False,
                                retries=2)
            by_key[fut.key] = c
            futures.append(fut)
        try:
            for fut in distributed.as_completed(futures):
                c = by_key[fut.key]
                try:
                    table, seconds = fut.result()
                except Exception as exc:  # noqa: BLE001 — includes KilledWorker after repeated crashes
                    failures[c.id] = f"{type(exc).__name__}: {exc}"
                    continue
                finish(c, table, seconds)
                fut.release()
        except BaseException:
            client.cancel(futures)
            raise


__all__ = ["CONNECT_TIMEOUT_S", "local_cluster", "connect", "dask_client", "run_dask"]
