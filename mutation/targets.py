"""Which tests exercise which source file: only these run against the file's mutants, under either operator set
(cosmic-ray, mutation/run.py; mutmut, mutation/mutmut_run.py). Data only; mutation/README.md explains the choices."""
from __future__ import annotations

#: source file -> the test files that exercise it (only these run against its mutants).
TARGETS: dict[str, list[str]] = {
    # The kernels run as plain Python here (NUMBA_DISABLE_JIT, see above), where math.exp overflows
    # with OverflowError instead of inf: tests that push `is` past ℓ ≈ 709.78 through a kernel are
    # left out, and the hypothesis-driven three-backend test is too slow to run once per mutant.
    "asyncgrpo/estimators/reference.py": ["tests/test_core_contracts.py", "tests/faults/test_functionals_faults.py"],
    "asyncgrpo/estimators/kernels.py": [
        "tests/test_core_contracts.py",
        "tests/test_estimators.py::test_numba_batch_and_group_functionals_match_reference",
    ],
    "asyncgrpo/functionals.py": [
        "tests/test_core_contracts.py", "tests/faults/test_functionals_faults.py", "tests/faults/test_api_types.py",
    ],
    "asyncgrpo/validation.py": ["tests/test_core_contracts.py", "tests/faults/test_api_types.py"],
    "simulate/delays.py": ["tests/test_core_contracts.py", "tests/test_delays.py"],
    "simulate/verdicts.py": ["tests/unit/test_decision_verdicts*.py", "tests/test_core_contracts.py",
                             "tests/test_verdicts.py"],
    # issue 39: the C6 overlap measurement, the protocol's C9 scope logic, the registry and the peers' maps.
    # A test that trains, or pushes a map's math.exp past ℓ ≈ 709.78, cannot run without the JIT: left out
    # (pytest's --deselect) where the file runs JIT-less. A pattern with * takes every test file it matches.
    "simulate/training/overlap.py": ["tests/test_mutation_overlap.py", "tests/test_c6_overlap.py"],
    # c9.py (issue 55): its unit tests, the pinned complete output and the scope rules (seconds); the protocol tests
    # that train cells (test_protocol*.py and one scope test, 45 s to minutes a run) are left to make test.
    "simulate/protocol/c9.py": [
        "tests/unit/test_decision_c9*.py", "tests/test_c9_pinned.py", "tests/test_c9_scope.py",
        "--deselect=tests/test_c9_scope.py::test_a_saturating_hand_written_mdp_names_saturated_with_the_measurement_in_every_row",
    ],
    "asyncgrpo/estimators/registry.py": [
        "tests/test_mutation_registry.py", "tests/test_registry.py", "tests/test_mutation_peers.py",
        "--deselect=tests/test_registry.py::test_parity_suite_on_every_registered_estimator[is]",
        "--deselect=tests/test_registry.py::test_every_peer_runs_in_the_learner",
        "--deselect=tests/test_registry.py::test_a_peer_runs_through_a_protocol_cell",
        "--deselect=tests/test_registry.py::test_an_estimator_from_a_temporary_module_reaches_the_learner_kit_and_parity",
    ],
    **{f"asyncgrpo/estimators/maps/{m}.py": [
        "tests/test_mutation_peers.py", "tests/test_peer_corrections.py", "tests/test_peer_losses.py",
        "tests/test_peer_parity_trl.py", "tests/test_peer_parity_verl.py",  # issue 36: against the installed peers
        *(f"tests/test_registry.py::test_parity_suite_on_every_registered_estimator[{n}]" for n in names),
        "--deselect=tests/test_peer_losses.py::test_sapo_weight_is_finite_in_log_space_and_differs_from_verl_only_below_minus_20",
        "--deselect=tests/test_peer_losses.py::test_peer_losses_run_in_the_learner_and_are_not_corrections",
    ] for m, names in (("trl_opsm", ["trl_seq_mask"]), ("luspo", ["luspo"]), ("gpg", ["gpg"]), ("sapo", ["sapo"]),
                       ("verl_rollout_corr", ["verl_seq_tis", "verl_seq_rs", "verl_tok_tis", "verl_geo_rs"]))},
    # issue 55: the code that draws conclusions, against its unit tests (tests/unit/test_decision_*.py, seconds each)
    # and the file's own fast tests.
    "simulate/protocol/headline.py": ["tests/unit/test_decision_headline*.py", "tests/test_headline.py"],
    "simulate/protocol/aggregate.py": ["tests/unit/test_decision_aggregate*.py"],
    "simulate/protocol/families.py": ["tests/unit/test_decision_families*.py", "tests/unit/test_decision_spec*.py"],
    "figures/report/answer.py": ["tests/unit/test_decision_answer*.py"],
    "figures/report/lm_runs.py": ["tests/unit/test_decision_answer*.py"],
    "figures/report/exploratory.py": ["tests/unit/test_decision_answer*.py"],  # the appendix, split out of answer.py
    "figures/report/lm_history.py": ["tests/unit/test_decision_lm_history*.py"],  # earlier LM versions' extract
    "simulate/protocol/spec.py": ["tests/unit/test_decision_spec*.py"],
    "simulate/llm/analysis.py": ["tests/unit/test_decision_analysis*.py"],
    # simulate score (issue 58): the scorecard's entries, markdown, rival set and refusals; the rule is headline.py's
    "simulate/score.py": ["tests/unit/test_decision_score*.py"],
    # the ladder's instances and rungs (tiny prompt-answer tasks)
    "simulate/bridge/rungs.py": ["tests/unit/test_decision_rungs*.py"],
    "simulate/bridge/ladder.py": ["tests/unit/test_decision_rungs*.py"],
    # the peers' config mappers: their unit tests first (seconds), then the parity with the installed TRL / verl
    "asyncgrpo/estimators/maps/trl_loss_config.py": ["tests/unit/test_decision_trl_loss_config*.py",
                                                     "tests/test_peer_trl_options.py"],
    "asyncgrpo/estimators/maps/verl_rollout_config.py": ["tests/unit/test_decision_verl_rollout_config*.py",
                                                         "tests/test_peer_verl_options.py"],
}
