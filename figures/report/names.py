"""The report's fixed names: the claim ids, the figures that judge them, the non-verdict word and the dash. Read by
the sidecar loader (:mod:`figures.report.data`) and the evidence check (:mod:`figures.report.evidence`) alike."""
from __future__ import annotations

CLAIM_IDS = ("C1", "C2", "C3", "C4", "C5", "C5-T", "C6", "C7", "C8", "C9")
#: Claims with no derivation (docs/THEORY.md §3): C9, and C5-T, the training implication of the bound C5.
EMPIRICAL = {
    "C5-T": ("delay cost in training falls with G", "in training at a fixed number of steps, the delay cost "
             "Δ(G) = nAUC(d=0) − nAUC(d) of gmc falls with G as the tuned bound's delay term predicts, tic's does not"),
    "C9": ("empirical robustness", "as the delay grows, is becomes unstable, onpolicy and tic/tis degrade, and gmc "
           "keeps the best objective among the stable estimators"),
}
LM_FIGURE = "fig_llm_delay"
REGIME_FIGURE = "fig_regime_map"
#: (figure, claim id in its sidecar) → the id its rows judge in the report.
TRAINING_IDS = {("fig_c5_protocol", "C5"): "C5-T"}
#: An evidence row that reports a number without judging anything: shown as "—", never counted as a verdict.
INFO = "reported"
#: Claims judged from one figure's rows only (C6: its inequality on training runs, not fig_delay's χ² checks).
VERDICT_FIGURE = {"C6": "fig_c6_overlap"}
DASH = "—"
