"""Figure 3 (C1): the second moment ``E‖ĝ‖²`` against ε with the common bound ``M₂(ε) = (1+ε)·E_π[A²‖s‖²]``.

Same sweep as figure 2 (cells cached, computed once). Every estimator is drawn; the bound applies
to those in ``𝒲_ε`` (tis, tic, gmc), while ``is`` and ``snis`` are outside the class (C1).
"""
from __future__ import annotations

import numpy as np

from figures import common, fig_bias_eps, plots, style

NAME = "fig3_second_moment"
TITLE = "Second moment against ε with M₂(ε) (C1)"
CLAIMS = ("C1",)


def plot(df, ax=None):
    """E‖ĝ‖² against ε for all estimators, M₂(ε) dashed; returns (fig, ax)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(style.WIDTH_1COL * 1.4, 3.0)) if ax is None else (ax.figure, ax)
    plots.quantity_vs(df, "eps", "sq_norm", ax=ax, bounds=False)
    s = df[(df.quantity == "sq_norm") & (df.estimator == "gmc")].sort_values("eps")
    ax.plot(s["eps"], s["bound"], ls="--", color=style.REFERENCE,
            label="C1's bound $M_2(\\varepsilon)=(1+\\varepsilon)\\,\\mathbb{E}_\\pi[A^2\\|s\\|^2]$\n(for tis, tic, gmc)")
    ax.set_xlabel(r"threshold $\varepsilon$")
    ax.set_ylabel(r"$\mathbb{E}_\mu\|\hat g\|^2$")
    plots.ticks_at(ax, df[df.quantity == "sq_norm"].eps.unique(), "{:.2g}")
    ax.tick_params(axis="x", labelsize=6.5, labelrotation=45)
    ax.set_title(f"token MDP, G = {fig_bias_eps.G}, d = {fig_bias_eps.DELAY}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=6.5)
    return fig, ax


def evidence(df) -> list[common.Evidence]:
    """Per in-class estimator, the ε where E‖ĝ‖² comes closest to M₂(ε)."""
    sub = df[(df.quantity == "sq_norm") & np.isfinite(df.bound)]
    return common.tightest(sub, "C1", "E‖ĝ_{name}‖² (tightest ε)",
                           lambda r: f"token MDP, G={int(r.G)}, d={int(r.d)}, ε={r.eps:.3g}", NAME)


CAPTION = ("Second moment E‖ĝ‖² against ε on the token MDP for every estimator (Monte Carlo, error bars 95 % intervals "
           "= ±1.96 s.e.), with C1's bound M₂(ε) = (1+ε)·E_π[A²‖s‖²] (dashed). Predicted: C1, tis, tic and gmc (the "
           "estimators in 𝒲_ε) below the bound at every ε; is, snis and onpolicy are outside the class and the bound "
           "says nothing about them. The bound is loose, and the report gives by how much.")


def main(out_dir, quick: bool = False, *, sweep_opts: dict | None = None) -> common.FigureResult:
    """Reuse figure 2's sweep (cached cells), draw figure 3, return C1's evidence."""
    return common.sweep_figure(NAME, out_dir, quick, fig_bias_eps.sweep(quick), plot, evidence,
                               settings=fig_bias_eps.settings(quick), seeds=[fig_bias_eps.SEED], sweep_opts=sweep_opts, caption=CAPTION)
