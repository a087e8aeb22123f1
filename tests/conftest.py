"""Shared pytest set-up: one fixed hypothesis profile so CI runs are reproducible."""
import os

# Thread-invariance tests compare 1 and 2 Numba threads; make 2 available even on a 1-CPU runner
# (set before anything imports numba, which reads it once).
if int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count() or 1)) < 2:
    os.environ["NUMBA_NUM_THREADS"] = "2"

from hypothesis import HealthCheck, settings

# derandomize: the same examples every run (fixed seed), so a CI failure reproduces locally.
settings.register_profile(
    "ci",
    max_examples=200,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=1000, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
