"""Dask worker preload: make a worker process exit as soon as its parent process is gone.

A ``LocalCluster`` started by the driver spawns its worker processes from nannies that live in the
driver itself. Dask's own watcher is a Python thread, so a worker busy in a long call that holds
the GIL (a Numba kernel, a C loop) outlives a SIGKILLed driver until that call returns: an orphan
holding memory and CPU for minutes. On Linux the kernel itself kills the worker when its parent
dies (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), GIL or not; elsewhere a daemon thread watches the
parent pid and exits when it changes (the worker was re-parented).
"""
from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time

_POLL_S = 0.2
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _kernel_death_signal() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies; ``False`` where unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(0)  # no cleanup left to do: the driver that owned this cluster is gone
        time.sleep(_POLL_S)


def start() -> None:
    """Arm both guards for the current parent (idempotent per process)."""
    if getattr(start, "_started", False):
        return
    start._started = True
    parent = os.getppid()
    _kernel_death_signal()
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(0)
    threading.Thread(target=_watch, args=(parent,), daemon=True, name="sweep-parent-guard").start()


def dask_setup(service) -> None:  # noqa: ARG001 — Dask's preload hook signature
    """Called by Dask in each worker process at start-up."""
    start()
