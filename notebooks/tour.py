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
# # A tour: one group's weights → bias against exact truth → a short stale training run
#
# This notebook walks through the toolkit in three steps, on instances small enough that the truth is
# exact (docs/THEORY.md §1):
#
# 1. **One group.** A behaviour policy `μ` that is `d` updates stale generates `G` trajectories; each
#    estimator turns their log-ratios `ℓ_i` into weights `w_i` (docs/THEORY.md §2).
# 2. **Bias against exact truth.** Averaged over all groups, `E ĝ − ∇J` splits into a *baseline part*
#    `−(1/G)∇J` (from centring the advantages; the same for every estimator, claim C8) and a *weighting
#    part* `E[(1/G)Σ(w_i − ρ_i)A_i s_i]` (from cutting the weights, claim C7). Both are computed exactly,
#    and a Monte Carlo run is checked against them.
# 3. **A short stale training run** with every estimator, at delay 0 and at a positive delay.
#
# Everything is computed by `asyncgrpo` and `simulate/`; the notebook only calls and draws. The claims
# are claims under test; their verdicts are in figures/REPORT.md.

# %%
import os

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from asyncgrpo import estimators as est
from asyncgrpo.functionals import bias_functional, group_mass, removed_mass
from figures import style
from simulate import delays as dl
from simulate import instances as ins
from simulate import montecarlo as mc
from simulate.training import TrainConfig, run_many

QUICK = os.environ.get("ASYNCGRPO_NOTEBOOK_QUICK", "0") == "1"  # the tests set this: fewer groups and seeds
style.apply()

# %% [markdown]
# ## 1. One group's weights
#
# The instance is a 3-armed bandit (`T = 1`: a trajectory is one arm) with rewards `R = (1, 0.4, 0)`.
# The current policy is `π_θ`; the behaviour policy is `μ = π_{θ − dη·u}`, i.e. as if `d` ascent steps
# of length `η` had been taken since the group was generated (`simulate.instances.stale_pair`).

# %%
eps, G, d = 0.2, 8, 8  # threshold ε, group size, delay
mdp = mc.make_instance("bandit")
_, scale, eta = mc.INSTANCES["bandit"]
theta = ins.random_theta(mdp, scale, seed=0)
theta_mu = ins.stale_pair(mdp, theta, d, eta)
pi = np.exp(ins.log_policy(theta))[0, mdp.s0]
mu = np.exp(ins.log_policy(theta_mu))[0, mdp.s0]
R = mdp.reward[mdp.next_state[0, mdp.s0]]  # reward of each arm
print(f"π_θ = {np.round(pi, 3)},  μ = {np.round(mu, 3)},  R = {R},  χ²(π_θ‖μ) = {ins.chi2(mdp, theta, theta_mu):.3f}")

rng = np.random.default_rng(1)
arms = rng.choice(len(mu), size=G, p=mu)  # G trajectories τ_i ~ μ
ell = np.log(pi[arms]) - np.log(mu[arms])  # ℓ_i = log π_θ(τ_i) − log μ(τ_i)
group = pd.DataFrame({"arm": arms, "R_i": R[arms], "A_i = R_i − R̄": R[arms] - R[arms].mean(), "ℓ_i": ell,
                      "ρ_i": np.exp(ell)})
for name in est.ESTIMATORS:
    group[f"w {name}"] = est.get(name, eps)(ell)
print(f"group mass ρ̄ = {group_mass(ell):.3f}  (gmc rescales the whole group only when ρ̄ > 1+ε = {1 + eps})")
group.round(3)

# %% [markdown]
# What each estimator removed from this group: the removed mass `(1/G)Σ(ρ_i − w_i)` and the ratio-based
# bias functional `𝔅(w;ρ) = (1/G)Σ(ρ_i − w_i)²/ρ_i` (claim C2: among `tis`, `tic`, `gmc`, gmc has the
# smallest 𝔅 for every group).

# %%
summary = pd.DataFrame({name: {"in 𝒲_ε": name in est.IN_CLASS, "mean w": est.get(name, eps)(ell).mean(),
                               "removed mass": removed_mass(ell, est.get(name, eps).log_weights(ell)),
                               "𝔅(w;ρ)": bias_functional(ell, est.get(name, eps).log_weights(ell))}
                        for name in est.ESTIMATORS}).T
summary

# %% [markdown]
# ## 2. Bias against exact truth: the baseline part and the weighting part
#
# `simulate.montecarlo.exact_expectations` sums over every group of `G` arms with its multinomial
# probability under `μ`, so `E ĝ` is exact. With `∇J` the exact gradient at `θ`:
#
# `E ĝ − ∇J = [E ĝ − (1 − 1/G)∇J] + [−(1/G)∇J]` = weighting part + baseline part.
#
# C8 says that for `is` the weighting part is exactly 0. C7 says that as `G` grows the weighting part of
# `gmc` goes to 0, while `tis` and `tic` keep a constant one; the baseline part `‖∇J‖/G` falls for all.

# %%
G_grid = [2, 4, 8, 16, 32, 64, 128]
grad_J = ins.exact_grad_J(mdp, theta)
atoms = mc.path_atoms(mdp, theta, theta_mu)
rows = []
for name in est.ESTIMATORS:
    for g in G_grid:
        Eg = mc.exact_expectations(mdp, theta, theta_mu, name, eps, g, atoms=atoms)["grad"]
        rows.append({"estimator": name, "G": g, "total": np.linalg.norm(Eg - grad_J),
                     "weighting": np.linalg.norm(Eg - (1 - 1 / g) * grad_J), "baseline": np.linalg.norm(grad_J) / g})
exact = pd.DataFrame(rows)

fig, axes = plt.subplots(1, 2, figsize=(style.WIDTH_2COL, 2.7), sharey=True)
for ax, part in zip(axes, ("weighting", "total")):
    for name in style.ordered(exact.estimator.unique()):
        s = exact[exact.estimator == name]
        y = s[part].where(s[part] > 1e-14)  # exact zeros (is, weighting part) cannot sit on a log axis
        ax.plot(s.G, y, marker=style.marker(name), color=style.color(name), label=name)
    base = exact[exact.estimator == "is"]
    ax.plot(base.G, base.baseline, ls="--", color=style.REFERENCE, label="baseline part ‖∇J‖/G")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("group size $G$")
axes[0].set_title(r"weighting part $\|E\hat g - (1-1/G)\nabla J\|$ (C7)")
axes[1].set_title(r"total bias $\|E\hat g - \nabla J\|$")
axes[0].legend(fontsize=6.5, ncol=2)
fig.suptitle(f"bandit, exact expectations, d = {d}, ε = {eps}", fontsize=9)
fig.tight_layout()

# %%
exact.pivot(index="G", columns="estimator", values="weighting").round(4)

# %% [markdown]
# **The same numbers by Monte Carlo.** `simulate.montecarlo.bias_table` samples `n` groups per `G` with
# the Numba kernel and reports each measured quantity with its standard error next to the exact value.
# With `z = (measured − exact)/se`, |z| above about 3 would mean the sampler and the exact engine disagree.

# %%
n_groups = 4_000 if QUICK else 40_000
table = mc.bias_table("bandit", estimators=("is", "tis", "tic", "gmc"), eps_list=(eps,), G_list=(4, 32),
                      delays=(d,), n_groups=n_groups, seed=0, progress=False)
table = table.replace({"quantity": {"stale_bias": "weighting_bias"}})  # the name before simulate.montecarlo's split
check = table[table.quantity == "weighting_bias"][["estimator", "G", "value", "se", "exact"]].copy()
check["z"] = (check.value - check.exact) / check.se.where(check.se > 0)
check.round(4)

# %% [markdown]
# Note that a *measured* norm of a mean has a small positive noise floor: `simulate.montecarlo` subtracts
# its expectation, so measured values near 0 (as for `is`) can come out slightly negative or positive.
#
# ## 3. A short stale training run
#
# The asynchronous learner of `simulate.training`: at step `k` the group is drawn from
# `μ_k = π_{θ_{k−d}}` and `θ_{k+1} = θ_k + η ĝ_k`; `J(θ_k)` is computed exactly at every step. The
# settings are taken from the pre-registered training protocol (docs/protocol.md,
# `simulate/protocol/protocol.toml`), not chosen for this notebook: its first instance (`count-frac`, a
# token MDP with partial-credit reward), its primary cell (ε, G, d), its sample budget (so `K = budget/G`
# steps), its evaluation seeds, and the midpoint of its initial step-size grid (the protocol tunes η per
# cell; this tour does not). A few seeds of one untuned setting: an illustration of what the C9 protocol
# measures, not its verdict (see figures/REPORT.md).

# %%
from simulate.protocol import get_instance
from simulate.protocol.spec import load_protocol

proto = load_protocol()
inst = get_instance(proto.instances[0])
eps_train, G_train, d_train = proto.primary["eps"], proto.primary["G"], proto.primary["d"]
steps = proto.budget // G_train
eta_train = 2.0 ** np.mean(proto.eta_log2)
n_seeds = 4 if QUICK else 16
names = ("onpolicy", "is", "tis", "tic", "gmc")
configs = [TrainConfig(instance=inst, estimator=n, G=G_train, eps=eps_train, eta=eta_train, steps=steps,
                       delay=dl.fixed(dd), seed=s)
           for dd in (0, d_train) for n in names for s in proto.eval_seeds[:n_seeds]]
runs = run_many(configs)

fig, axes = plt.subplots(1, 2, figsize=(style.WIDTH_2COL, 2.7), sharey=True)
rows = []
for ax, dd in zip(axes, (0, d_train)):
    for n in names:
        rs = [r for c, r in zip(configs, runs) if c.estimator == n and c.delay == dl.fixed(dd)]
        J = np.vstack([r.J for r in rs])
        m, se = np.nanmean(J, 0), np.nanstd(J, 0, ddof=1) / np.sqrt(len(rs))
        ax.plot(m, color=style.color(n), ls="--" if n == "is" else "-", label=n)  # is and gmc can coincide
        ax.fill_between(np.arange(len(m)), m - se, m + se, color=style.color(n), alpha=0.2, lw=0)
        final = np.array([r.final_J for r in rs])
        rows.append({"d": dd, "estimator": n, "final J": final.mean(), "se": final.std(ddof=1) / np.sqrt(len(rs)),
                     "diverged": sum(r.diverged for r in rs), "median χ²": np.nanmedian(np.concatenate([r.chi2 for r in rs]))})
    ax.axhline(rs[0].J_star, color=style.REFERENCE, ls=":", lw=1)
    ax.set_title(f"delay d = {dd}")
    ax.set_xlabel("learner step $k$")
axes[0].set_ylabel(r"$J(\theta_k)$ (mean ± s.e. over seeds)")
axes[0].legend(fontsize=6.5)
fig.suptitle(f"{inst.name}: η = {eta_train:g}, G = {G_train}, ε = {eps_train}, K = {steps}, {n_seeds} seeds", fontsize=9)
fig.tight_layout()

# %%
result = pd.DataFrame(rows).set_index(["d", "estimator"])
result.style.format({"final J": "{:.4f}", "se": "{:.4f}", "median χ²": "{:.2g}"})

# %% [markdown]
# Where to go next: `notebooks/eps_G_tradeoff` (sliders over ε, G and d), `notebooks/estimator_explorer`
# (one group in detail), docs/THEORY.md (every claim with its premise and check), and
# `python -m figures` for the full claims report.
