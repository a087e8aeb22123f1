"""Property-test kit for weight maps: hypothesis strategies and :func:`check_weight_map`.

    >>> from asyncgrpo.testing import check_weight_map
    >>> report = check_weight_map(my_map, eps=0.2)     # my_map(ell, eps) -> w
    >>> print(report)                                   # one row per property, verdicts, counterexamples
    >>> report.to_frame()                               # the same as a pandas DataFrame

The same from a shell: ``python -m asyncgrpo.check mypkg.module:my_map --eps 0.2``. Properties and
their meaning: :mod:`asyncgrpo.testing.properties`; strategies: :mod:`asyncgrpo.testing.strategies`.
Needs ``hypothesis`` (the ``test`` extra) and scipy.
"""
try:
    import hypothesis  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError("asyncgrpo.testing needs hypothesis: pip install 'asyncgrpo[test]'") from exc

from asyncgrpo.testing import strategies  # noqa: E402
from asyncgrpo.testing.parity import check_backends  # noqa: E402
from asyncgrpo.testing.properties import (  # noqa: E402
    DESCRIPTIONS,
    HOLDS,
    KINDS,
    MEMBERSHIP,
    OUT_OF_SCOPE,
    REFUTED,
    PropertyResult,
    WeightMapReport,
    c2_minimum_qp,
    check_weight_map,
    registry_map,
)

__all__ = [
    "strategies", "check_backends", "check_weight_map", "c2_minimum_qp", "registry_map", "WeightMapReport", "PropertyResult",
    "MEMBERSHIP", "KINDS", "DESCRIPTIONS", "HOLDS", "REFUTED", "OUT_OF_SCOPE",
]
