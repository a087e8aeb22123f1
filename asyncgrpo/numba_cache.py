"""Numba's on-disk cache, keyed by the code version of the kernels (issue 27 item 13).

``@njit(cache=True)`` keys a compiled kernel on its own file only: editing a function it calls in
*another* file (``log_weights_nb``, ``weight_terms_nb``, ``sample_paths_nb`` …) leaves the stale
machine code in use. :func:`configure` points Numba's cache at a directory named by a hash of every
kernel source of the given packages, so any edit to any kernel file starts a new cache and a stale kernel
can never run. It must run before the first ``@njit(cache=True)`` decorator executes; the packages'
``__init__`` call it first. The base directory is ``$NUMBA_CACHE_DIR`` when the user set it, else
``$XDG_CACHE_HOME/asyncgrpo-numba`` (``~/.cache/asyncgrpo-numba``).

Extra estimator modules named in ``$ASYNCGRPO_ESTIMATORS`` (:mod:`asyncgrpo.estimators.registry`) live
outside the packages; their source fingerprint (:func:`asyncgrpo.plugins.plugin_fingerprint`) joins the
hash, since the registry's generated Numba dispatch (and every kernel that calls it) compiles their
kernels in.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from asyncgrpo.plugins import plugin_fingerprint

_DONE: dict[str, str] = {}


def sources_hash(roots) -> str:
    """SHA-256 (16 hex digits) over the relative path and bytes of every ``.py`` file under ``roots``
    that holds a Numba kernel (``njit``), in sorted order."""
    h = hashlib.sha256()
    for root in sorted(Path(r).resolve() for r in roots):
        for f in sorted(root.rglob("*.py")):
            data = f.read_bytes()
            if b"njit" in data:
                h.update(str(f.relative_to(root.parent)).encode() + b"\0" + data + b"\0")
    return h.hexdigest()[:16]


def configure(roots=None) -> str:
    """Set ``numba.config.CACHE_DIR`` to ``<base>/<sources_hash(roots)>`` and return it (default roots:
    the ``asyncgrpo`` and ``simulate`` packages; with ``$ASYNCGRPO_ESTIMATORS`` set, a second hash of those
    modules' files is appended). Idempotent per set of roots."""
    if roots is None:
        here = Path(__file__).resolve().parent
        roots = [here] + [p for p in (here.parent / "simulate",) if p.is_dir()]
    key = "|".join(sorted(str(Path(r).resolve()) for r in roots))
    if key in _DONE:
        return _DONE[key]
    import numba

    user = os.environ.get("NUMBA_CACHE_DIR")
    base = Path(user) if user else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "asyncgrpo-numba"
    name = sources_hash(roots)
    plugins = plugin_fingerprint(strict=False)  # a module not found: the registry raises naming it
    if plugins:
        name += "-" + hashlib.sha256("".join(f"{m}={d};" for m, d in sorted(plugins.items())).encode()).hexdigest()[:16]
    path = str(base / name)
    numba.config.CACHE_DIR = path
    _DONE[key] = path
    return path


__all__ = ["configure", "sources_hash"]
