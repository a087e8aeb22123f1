"""Simulations: instances, Monte Carlo, the asynchronous learner, the training protocol and the LM harness.

Importing the package configures Numba's cache first (:mod:`asyncgrpo.numba_cache`): every kernel here
is ``@njit(cache=True)`` and calls kernels in other files, so the cache is keyed by all their sources.
"""
import asyncgrpo  # noqa: F401  (sets numba.config.CACHE_DIR before any kernel below is decorated)
