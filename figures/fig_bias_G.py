"""Figure 1 (C7, C8): bias against G for every estimator at fixed staleness, split into its two parts.

Monte Carlo on the token MDP (:func:`simulate.montecarlo.bias_table`, one sweep cell per ``G``) at
fixed ``ε`` and delay ``d``. With ``A = R − R̄``, ``E ĝ_w − ∇J = −(1/G)∇J + E[ĝ_w − ĝ_is]``
(docs/THEORY.md §3 C7, C8). (a) the **weighting part** ``‖E[ĝ_w − ĝ_is]‖`` (measured on the same
groups; exact values, where the count engine reaches, as open markers): C7 is judged on it — it
→ 0 for gmc and tends to a non-zero constant for tis/tic. (b) the **baseline part** ``‖∇J‖/G``
(exact) with the total bias of ``is``, which is exactly that (C8). (c) ``E𝔅(w;ρ)`` with theory's C4
bounds dashed. (d) removed mass ``E(1/G)Σ(ρ_i − w_i)`` with GMC's C7 bound ``σ²/(4εG)`` dashed.
"""
from __future__ import annotations

import numpy as np

from asyncgrpo import estimators as est
from figures import common, plots, stats, style
from sweep import Sweep

NAME = "fig1_bias_vs_G"
TITLE = "Bias against G at fixed staleness (C7)"
CLAIMS = ("C7", "C8")
INSTANCE, EPS, DELAY = "token-mdp", 0.1, 8
#: Fresh seed (issue 54): C7's TOST margin (figures.report.claims.EQUIV_REL, ±10 %) was first chosen after seeing
#: seed 0; it was fixed before this seed was run (2026-12-07), so C7's equivalence test is on data it did not see.
SEED = 20261207


def settings(quick: bool = False) -> dict:
    """Grid and sizes; ``quick`` keeps 3 group sizes and 2 000 groups per cell."""
    return {"G": [2, 8, 32] if quick else [2, 4, 8, 16, 32, 64, 128], "n_groups": 2_000 if quick else 40_000,
            "instance": INSTANCE, "eps": EPS, "d": DELAY, "seed": SEED}


def sweep(quick: bool = False) -> Sweep:
    s = settings(quick)
    return Sweep.from_grid(f"bias_G{'_quick' if quick else ''}", "figures.cells:bias_cell", {"G": s["G"]},
                           fixed={"instance": s["instance"], "estimators": list(est.ESTIMATORS), "eps": s["eps"],
                                  "d": s["d"], "n_groups": s["n_groups"], "seed": s["seed"]})


def plot(df, axes=None):
    """Four panels (weighting part, baseline part, E𝔅, removed mass) against G; returns (fig, axes)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(style.WIDTH_2COL * 1.15, 3.6)) if axes is None else (axes[0].figure, axes)
    plots.quantity_vs(df, "G", "weighting_bias", ax=axes[0], exact=True, bounds=False,
                      estimators=["onpolicy", "tis", "tic", "gmc", "snis"])
    axes[0].set_title("(a) weighting part (C7)\npredicted: gmc → 0, tis/tic → constant", fontsize=7)
    axes[0].set_ylabel(r"$\|\mathbb{E}[\hat g_w-\hat g_{is}]\|$")
    base = df[(df.quantity == "baseline_bias")].drop_duplicates("G").sort_values("G")
    axes[1].plot(base["G"], base["exact"], ls="--", color=style.REFERENCE, label=r"$\|\nabla J\|/G$ (exact; C8's prediction)")
    plots.quantity_vs(df, "G", "grad_bias", ax=axes[1], estimators=["is"], bounds=False, label_suffix=" total bias")
    axes[1].set_title("(b) baseline part (C8)\npredicted: is's total bias = ‖∇J‖/G", fontsize=7)
    axes[1].set_ylabel(r"$\|\mathbb{E}\,\hat g-\nabla J\|$ (total bias)")
    plots.quantity_vs(df, "G", "bias_functional", ax=axes[2], estimators=["tis", "tic", "gmc", "snis", "onpolicy"])
    axes[2].set_title("(c) bias functional (C4)\npredicted: below its bound (dashed)", fontsize=7)
    axes[2].set_ylabel(r"$\mathbb{E}\,\mathfrak{B}(w;\rho)$")
    plots.quantity_vs(df, "G", "removed_mass", ax=axes[3], estimators=["tis", "tic", "gmc"])
    axes[3].set_title("(d) removed mass (C7)\npredicted: gmc below σ²/(4εG) (dashed)", fontsize=7)
    axes[3].set_ylabel(r"$\mathbb{E}\,\frac{1}{G}\sum_i(\rho_i-w_i)$")
    Gs = sorted(df["G"].unique())
    for ax in axes:
        ax.set_xlabel("group size $G$")
        ax.set_xscale("log", base=2)
        plots.ticks_at(ax, Gs, "{:.0f}")
        ax.tick_params(axis="x", labelsize=6.5)
    # legends below the panels, never over the data
    for ax, ncol in zip(axes, (2, 1, 2, 2)):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=ncol, fontsize=6, columnspacing=0.8,
                  handlelength=1.8)
    fig.suptitle(f"token MDP, fixed staleness d = {DELAY}, ε = {EPS}: bias = baseline part (C8) + weighting part (C7)",
                 fontsize=9)
    fig.tight_layout(w_pad=0.8)
    return fig, axes


def evidence(df) -> list[common.Evidence]:
    """C7 on the weighting part (gmc vs tis/tic at the largest G; its shape in G reported) and gmc's removed
    mass vs σ²/(4εG); C8: the total bias of ``is`` equals the baseline part ‖∇J‖/G."""
    ev = []
    Gmax = int(df["G"].max())
    at = f"token MDP, ε={EPS}, d={DELAY}, G={Gmax}"
    r = df[(df.G == Gmax) & (df.estimator == "gmc") & (df.quantity == "removed_mass")].iloc[0]
    ev.append(common.Evidence("C7", "E removed mass, gmc", at, r.value, r.se, r.bound,
                              stats.verdict(r.value, r.se, r.bound), NAME, note="bound σ²/(4εG) (C7)"))
    wb = df[(df.G == Gmax) & (df.quantity == "weighting_bias")].set_index("estimator")
    for other in ("tis", "tic"):
        # C7 is about the part the weights are responsible for: gmc's is below the G-independent one of tis/tic
        diff = wb.loc["gmc", "value"] - wb.loc[other, "value"]
        se = float(np.hypot(wb.loc["gmc", "se"], wb.loc[other, "se"]))
        ev.append(common.Evidence("C7", f"weighting part ‖E[ĝ−ĝ_is]‖: gmc − {other}", at, diff, se, 0.0,
                                  stats.verdict(diff, se, 0.0), NAME, note="claim: ≤ 0 at large G"))
    g = df[(df.estimator == "gmc") & (df.quantity == "weighting_bias")].sort_values("G")
    y = np.where(np.isfinite(g["exact"]), g["exact"], g["value"])
    k = int(np.argmax(y))
    ev.append(common.Evidence("C7", "weighting part of gmc: G at its peak", f"token MDP, ε={EPS}, d={DELAY}",
                              float(g["G"].iloc[k]), None, None, "reported", NAME,
                              note=f"peak {y[k]:.3g}, {y[-1]:.3g} at G={Gmax}; not monotone in G when the peak is "
                                   f"inside the grid (exact where the count engine reaches, else measured)"))
    for name in ("tis", "tic"):
        # E removed mass of tis/tic is E_μ(ρ−1−ε)₊ resp. E_μ[ρ 1{ρ>1+ε}] for every G: it cannot vanish.
        s = df[(df.estimator == name) & (df.quantity == "removed_mass")].sort_values("G")
        lo, hi = s.iloc[0], s.iloc[-1]
        diff, se = hi.value - lo.value, float(np.hypot(hi.se, lo.se))
        ev.append(common.Evidence("C7", f"E removed mass {name}: G={int(hi.G)} minus G={int(lo.G)}",
                                  f"token MDP, ε={EPS}, d={DELAY}", diff, se, 0.0, stats.verdict_equal(diff, se, 0.0),
                                  NAME, note=f"claim: constant in G (value {hi.value:.3g} at G={int(hi.G)}); 'bound' = 0 difference"))
    s = df[(df.estimator == "is") & (df.quantity == "grad_bias")].sort_values("G")
    base = df[df.quantity == "baseline_bias"].drop_duplicates("G").set_index("G")["exact"]
    for _, r in s.iterrows():
        # The delta-method se of a norm is only valid far from 0: use the rows where the bias is resolved.
        target = float(base.loc[r.G])
        if target > 10 * r.se:
            ev.append(common.Evidence("C8", "total bias of is vs its baseline part ‖∇J‖/G", f"token MDP, G={int(r.G)}, d={DELAY}",
                                      r.value, r.se, target, stats.verdict_equal(r.value, r.se, target), NAME,
                                      note="'bound' is the exact baseline part; verdict: within 3·se; rows with ‖∇J‖/G > 10·se"))
    return ev


CAPTION = ("Bias against the group size G on the token MDP at fixed staleness (Monte Carlo, error bars 95 % "
           "intervals = ±1.96 s.e.; open markers: exact values where the count engine reaches): (a) the weighting part "
           "‖E[ĝ_w − ĝ_is]‖, (b) the baseline part ‖∇J‖/G with the total bias of is, (c) E𝔅 with the C4 bounds "
           "(dashed), (d) the removed mass with gmc's C7 bound σ²/(4εG) (dashed). Predicted: C7, gmc's weighting part "
           "tends to 0 while tis/tic tend to a non-zero constant (a), and gmc's removed mass stays below σ²/(4εG) (d); "
           "C8, the total bias of is equals ‖∇J‖/G exactly (b, dashed line); C4, every E𝔅 below its bound (c). Look at "
           "the tail of (a), not at the total bias (mostly the baseline part).")


def main(out_dir, quick: bool = False, *, sweep_opts: dict | None = None) -> common.FigureResult:
    """Run the sweep (cached), draw figure 1, return its C7/C8 evidence."""
    return common.sweep_figure(NAME, out_dir, quick, sweep(quick), plot, evidence, settings=settings(quick), seeds=[SEED],
                               sweep_opts=sweep_opts, caption=CAPTION)
