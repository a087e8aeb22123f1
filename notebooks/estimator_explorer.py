# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Estimator explorer (docs/THEORY.md §2, §3 C2, C7)
#
# Draw one group of `G` log-ratios `ℓ_i = log π_θ(τ_i) − log μ(τ_i)`, look at every estimator's weights
# `w_i`, the removed mass `(1/G)Σ(ρ_i − w_i)` and the ratio-based bias functional
# `𝔅(w;ρ) = (1/G)Σ(ρ_i − w_i)²/ρ_i` side by side, then the bias against `G` from the Monte Carlo sweep of
# figure 1. All computations come from `asyncgrpo` (the estimator registry and `functionals`) and `figures`.
#
# **Controls**: sliders for `G`, `ε`, `σ` (spread of the log-ratios, i.e. the staleness) and the `seed`
# of the draw (with a widget front-end: `.venv/bin/jupyter lab notebooks/`); headless runs use the
# defaults below.

# %%
import contextlib
import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import display

from asyncgrpo import estimators as est
from asyncgrpo.functionals import bias_functional, ess, group_mass, removed_mass
from figures import style

QUICK = os.environ.get("ASYNCGRPO_NOTEBOOK_QUICK", "0") == "1"  # the tests set this: small sweep
style.apply()

try:  # the widgets are optional: without ipywidgets the cells run on the defaults
    import ipywidgets as widgets
except ImportError:
    widgets = None

# %%
DEFAULTS = dict(G=8, eps=0.2, sigma=0.6, seed=3)  # σ: std of ℓ; ℓ ~ N(−σ²/2, σ²) so that E_μ ρ = 1


def draw_group(G, sigma, seed) -> np.ndarray:
    """One group of log-ratios ``ℓ ~ N(−σ²/2, σ²)`` (so ``E_μ ρ = 1``), drawn from ``seed``."""
    return np.random.default_rng(seed).normal(-sigma**2 / 2, sigma, size=G)


def weights_table(ell, eps):
    """Per estimator: class membership, mean weight, removed mass, 𝔅(w;ρ), ESS; and the weights themselves."""
    rows, W = [], {}
    for name in est.ESTIMATORS:
        wm = est.get(name, eps)
        logw = wm.log_weights(ell)
        W[name] = np.exp(logw)
        rows.append({"estimator": name, "in 𝒲_ε": wm.in_class, "mean w": W[name].mean(),
                     "removed mass": removed_mass(ell, logw), "𝔅(w;ρ)": bias_functional(ell, logw), "ESS": ess(logw)})
    return pd.DataFrame(rows).set_index("estimator"), W


def draw(ell, table, W, eps):
    """Weights per trajectory (ρ_i as black ticks), removed mass and 𝔅 per estimator; returns the figure."""
    G = len(ell)
    fig, axes = plt.subplots(1, 3, figsize=(style.WIDTH_2COL, 2.6))
    x = np.arange(G)
    width = 0.8 / len(est.ESTIMATORS)
    for j, name in enumerate(est.ESTIMATORS):
        axes[0].bar(x + j * width, W[name], width, color=style.color(name), label=name)
    axes[0].plot(x + 0.4, np.exp(ell), "k_", ms=12, label="ρ_i")
    axes[0].set_xlabel("trajectory $i$")
    axes[0].set_ylabel("weight $w_i$")
    axes[0].legend(fontsize=6, ncol=2)
    for ax, col in zip(axes[1:], ("removed mass", "𝔅(w;ρ)")):
        ax.bar(table.index, table[col], color=[style.color(n) for n in table.index])
        ax.set_title(col)
        ax.tick_params(axis="x", rotation=45)
    fig.suptitle(f"G = {G}, ε = {eps:g}: ρ̄ = {group_mass(ell):.3f}, 1+ε = {1 + eps:g}", fontsize=9)
    fig.tight_layout()
    return fig


if widgets is not None:
    W_ = dict(G=widgets.IntSlider(value=DEFAULTS["G"], min=2, max=32, description="G", continuous_update=False),
              eps=widgets.FloatLogSlider(value=DEFAULTS["eps"], base=10, min=-2, max=0, step=0.05, description="ε",
                                         readout_format=".3f", continuous_update=False),
              sigma=widgets.FloatSlider(value=DEFAULTS["sigma"], min=0.05, max=2.0, step=0.05, description="σ",
                                        continuous_update=False),
              seed=widgets.IntSlider(value=DEFAULTS["seed"], min=0, max=99, description="seed", continuous_update=False))
else:
    W_ = {}
out = widgets.Output() if widgets is not None else None
state = {}  # the latest draw: settings, ℓ, table (read by the cells below)


def controls() -> dict:
    """The current settings: the sliders' values, or ``DEFAULTS`` without a widget front-end."""
    return {k: w.value for k, w in W_.items()} if W_ else dict(DEFAULTS)


def update(change=None):
    """Draw a group at the current controls and redraw the weights, removed mass and 𝔅."""
    c = controls()
    ell = draw_group(c["G"], c["sigma"], c["seed"])
    table, W = weights_table(ell, c["eps"])
    with out if out is not None else contextlib.nullcontext():
        if out is not None:
            out.clear_output(wait=True)
        fig = draw(ell, table, W, c["eps"])
        plt.show(fig) if out is not None else display(fig)
        plt.close(fig)
        print(f"ρ = {np.round(np.exp(ell), 3)}")
    state.update(c, ell=ell, table=table, n_updates=state.get("n_updates", 0) + 1)


if widgets is not None:
    for w in W_.values():
        w.observe(update, names="value")
    display(widgets.VBox([widgets.HBox([W_["G"], W_["eps"]]), widgets.HBox([W_["sigma"], W_["seed"]]), out]))
update()  # headless runs compute and show the default state through the same callback
state["table"]

# %% [markdown]
# C2: among the estimators in `𝒲_ε` (tis, tic, gmc), gmc has the smallest 𝔅 and removed mass — for every
# group, not only on average (this cell checks it for the group currently drawn):

# %%
table = state["table"]
assert table.loc["gmc", "𝔅(w;ρ)"] <= min(table.loc["tis", "𝔅(w;ρ)"], table.loc["tic", "𝔅(w;ρ)"]) + 1e-12
table.loc[["tis", "tic", "gmc"], ["removed mass", "𝔅(w;ρ)"]]

# %% [markdown]
# ## Bias against G (C7), from figure 1's sweep
#
# Same sweep definition as `python -m figures` (cells are shared through the cache in `results/cells/`).

# %%
from figures import common, fig_bias_G

res = common.run(fig_bias_G.sweep(quick=QUICK), {"backend": "serial" if QUICK else "local", "progress": not QUICK})
fig, axes = fig_bias_G.plot(res.table)
