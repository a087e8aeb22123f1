"""Monte Carlo of estimator bias and second moment under controlled staleness (docs/THEORY.md §1–§3).

One file per idea:

- :mod:`.kernel` — the Numba kernel (sampling, weights, ``‖ĝ‖²`` by the Gram or the vector route, batch sums);
- :mod:`.run` — :func:`run_mc` (tables, memory plan, the kernel call) and :class:`MCResult`;
- :mod:`.reference` — the vectorised NumPy reference and the shared weight functionals;
- :mod:`.exact` — exact expectations (dynamic programming, path sums, count vectors) with their size limits;
- :mod:`.tables` — the named instances and the tidy :func:`bias_table` (bias decomposed into baseline and weighting parts).
"""
from simulate.montecarlo.exact import (
    MAX_COUNT_STATES,
    MAX_COUNT_WORK,
    MAX_GROUP_ATOMS,
    ExactLimitWarning,
    PathAtoms,
    exact_by_counts,
    exact_expectations,
    exact_second_moment_S,
    exact_table,
    n_count_vectors,
    path_atoms,
)
from simulate.montecarlo.kernel import (
    EST_QUANTITIES,
    GROUP_QUANTITIES,
    ROUTES,
    choose_route,
    pack_table,
)
from simulate.montecarlo.reference import (
    cut_terms,
    log_weights_batch,
    reference_mc,
    weight_functionals,
)
from simulate.montecarlo.run import (
    GRAD_MEMORY_BUDGET,
    MCResult,
    Prepared,
    available_memory,
    check_memory,
    chunk_seeds,
    plan_memory,
    prepare,
    run_mc,
    slots_of,
)
from simulate.montecarlo.tables import (
    BIAS_QUANTITIES,
    INSTANCES,
    bias_table,
    decomposition,
    format_decomposition,
    format_table,
    make_instance,
)

__all__ = [
    "BIAS_QUANTITIES",
    "EST_QUANTITIES",
    "GRAD_MEMORY_BUDGET",
    "GROUP_QUANTITIES",
    "INSTANCES",
    "MAX_COUNT_STATES",
    "MAX_COUNT_WORK",
    "MAX_GROUP_ATOMS",
    "ROUTES",
    "ExactLimitWarning",
    "MCResult",
    "PathAtoms",
    "Prepared",
    "available_memory",
    "bias_table",
    "check_memory",
    "choose_route",
    "chunk_seeds",
    "cut_terms",
    "decomposition",
    "exact_by_counts",
    "exact_expectations",
    "exact_second_moment_S",
    "exact_table",
    "format_decomposition",
    "format_table",
    "log_weights_batch",
    "make_instance",
    "n_count_vectors",
    "pack_table",
    "path_atoms",
    "plan_memory",
    "prepare",
    "reference_mc",
    "run_mc",
    "slots_of",
    "weight_functionals",
]
