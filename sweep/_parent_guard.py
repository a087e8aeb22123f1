"""Dask preload: make a nanny or worker process exit as soon as its parent process is gone.

A ``LocalCluster`` started by the driver runs nanny processes whose children are the workers.
If the driver is SIGKILLed, nothing tells them to stop, and they linger as orphans holding
memory and CPU. Each process watches its parent pid from a daemon thread and exits when it
changes (the process was re-parented): the nanny follows the driver, the worker its nanny.
"""
from __future__ import annotations

import os
import threading
import time

_POLL_S = 0.2


def _watch(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(0)  # no cleanup left to do: the driver that owned this cluster is gone
        time.sleep(_POLL_S)


def start() -> None:
    """Start the watcher for the current parent (idempotent per process)."""
    if getattr(start, "_started", False):
        return
    start._started = True
    threading.Thread(target=_watch, args=(os.getppid(),), daemon=True, name="sweep-parent-guard").start()


def dask_setup(service) -> None:  # noqa: ARG001 — Dask's preload hook signature
    """Called by Dask in each nanny and worker process at start-up."""
    start()
