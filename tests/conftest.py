"""Shared pytest set-up: one fixed hypothesis profile so CI runs are reproducible."""
import os

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
