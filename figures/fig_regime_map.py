"""The regime map (issue 24 item 2): where does correcting stale rollouts with gmc help?

One heat map per instance of ``nAUC(gmc) − nAUC(onpolicy)`` (mean over the held-out seeds, paired), delay d
across, the common step size ``η = f·η₀`` up (η₀: onpolicy's η tuned at d = 0 for that instance and G,
shared by every estimator at every d), at the primary G and ε. Colour: sign and size on a diverging scale
centred at 0 (blue: gmc ahead; red: onpolicy ahead), shared by every panel; a black frame marks a cell whose
95 % paired t-interval excludes 0; "†" marks a cell where gmc's failure rate exceeds the protocol's p₀. The
sidecar holds the tidy comparison table at the primary G, ε and the boundary (smallest d at which each side
is significantly ahead), from :func:`simulate.protocol.regime_map.regime_map`.
"""
from __future__ import annotations

import math
import os
import textwrap
import time

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.patches import Rectangle

from figures import common, style

NAME = "fig_regime_map"
TITLE = "Regime map: gmc − onpolicy in nAUC over delay and step size (C9)"
CLAIMS = ("C9",)
CMAP = "RdBu"  # red: negative (onpolicy ahead), blue: positive (gmc ahead)
CAPTION = ("Regime map: per instance, nAUC(gmc) − nAUC(onpolicy) (mean over the held-out seeds, "
           "paired by seed), the delay d across and the step size up: the rows below the line are the common-η arm "
           "η = f·η₀, where η₀ is onpolicy's η tuned at d = 0 for that instance and G and is shared by every estimator "
           "at every d (a practitioner who tuned before the delay appeared); the top row is the tuned arm (η tuned "
           "for each estimator and d on the tuning seeds); primary G and ε (the G and ε axes: fig_regime_slices). Blue: gmc ahead; red: the uncorrected learner ahead; one colour scale "
           "for every panel. Black frame: the 95 % paired t-interval over seeds excludes 0 (per cell, no multiplicity "
           "correction); †: gmc's failure rate (divergence, collapse or lock-in) above the protocol's p₀. Predicted "
           "(C9, with C3/C6: the overlap χ² and hence the bias of the uncorrected gradient grow with d): gmc is never "
           "behind by more than the margin δ = 0.02, and its advantage grows with d, so the panels should turn blue "
           "towards large d, most at large η. The boundary (smallest d at which gmc is significantly ahead, and at which "
           "onpolicy is) is in the sidecar and the report's evidence rows.")


def _factor_label(f: float) -> str:
    if f >= 1:
        return f"{f:g}"
    inv = 1 / f
    return f"1/{inv:g}" if abs(inv - round(inv)) < 1e-9 else f"{f:g}"


def _row_label(row) -> str:
    kind, v = row
    if kind == "tuned":
        return "tuned"
    if kind == "G":
        return f"G={int(v)}"
    if kind == "eps":
        return f"ε={v:g}"
    return _factor_label(v)


def panel_data(m, G: int, eps: float, axis: str = "eta") -> dict:
    """{instance: dict(delays, rows, est (rows × delays), sig (bool), unstable (bool), eta0)}.

    ``axis="eta"``: the rows are the common arm's factors f at (G, ε) and, when the map has it, the tuned
    arm on top; ``axis="G"`` / ``"eps"``: the rows are the map's G (at ε) / ε (at G) values, common arm at
    f = 1."""
    comp = m.comparisons
    comp = comp[comp.comparison == "gmc − onpolicy"]
    arm = comp.arm if "arm" in comp else pd.Series("common", index=comp.index)
    if axis == "eta":
        sel = comp[(comp.G == G) & np.isclose(comp.eps, eps)]
        sel_arm = arm[sel.index]
        rows = [("common", float(f)) for f in sorted(sel[sel_arm == "common"].eta_factor.unique())]
        rows += [("tuned", 1.0)] if (sel_arm == "tuned").any() else []
        row_of = lambda r: ("tuned", 1.0) if getattr(r, "arm", "common") == "tuned" else ("common", float(r.eta_factor))  # noqa: E731
    elif axis in ("G", "eps"):
        sel = comp[(arm == "common") & np.isclose(comp.eta_factor, 1.0)]
        sel = sel[np.isclose(sel.eps, eps)] if axis == "G" else sel[sel.G == G]
        rows = [(axis, float(v)) for v in sorted(sel[axis].unique())]
        row_of = lambda r: (axis, float(getattr(r, axis)))  # noqa: E731
    else:
        raise ValueError(f"axis must be 'eta', 'G' or 'eps', got {axis!r}")
    delays = sorted(int(d) for d in sel.d.unique())
    out = {}
    for inst in m.settings["instances"]:
        s = sel[sel.instance == inst]
        if s.empty:
            continue
        est = np.full((len(rows), len(delays)), np.nan)
        sig = np.zeros_like(est, dtype=bool)
        unstable = np.zeros_like(sig)
        for r in s.itertuples(index=False):
            i, j = rows.index(row_of(r)), delays.index(int(r.d))
            est[i, j] = r.estimate
            sig[i, j] = bool(r.lo > 0 or r.hi < 0)
            unstable[i, j] = bool(r.fail_rate_gmc > m.protocol.failure_p0)
        e0 = m.etas[(m.etas.instance == inst) & (m.etas.G == G)].eta_tuned
        out[inst] = dict(delays=delays, rows=rows, factors=[v for k, v in rows if k == "common"], est=est, sig=sig,
                         unstable=unstable, eta0=float(e0.iloc[0]) if len(e0) else math.nan)
    return out


def draw_panel(ax, p: dict, vmax: float):
    """One heat map (rows × delays) of :func:`panel_data`'s entry ``p`` on ``ax``: colour on the shared
    diverging scale ±vmax, the value in each cell (†: gmc fails above p₀), a frame where significant."""
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-vmax, vmax=vmax)
    est = p["est"]
    if "rows" not in p:  # a panel given by its common-arm factors alone
        p = dict(p, rows=[("common", float(f)) for f in p["factors"]])
    im = ax.imshow(est, cmap=CMAP, norm=norm, origin="lower", aspect="auto")
    for i in range(est.shape[0]):
        for j in range(est.shape[1]):
            v = est[i, j]
            if not np.isfinite(v):
                continue
            txt = ("0" if v == 0 else f"{v:+.2f}".replace("0.", ".").replace("-", "−")) + (
                "†" if p["unstable"][i, j] else "")
            ax.text(j, i, txt, ha="center", va="center", fontsize=5.2, color="white" if abs(v) > 0.6 * vmax else "black")
            if p["sig"][i, j]:
                # inset, so that neighbouring significant cells keep separate frames
                ax.add_patch(Rectangle((j - 0.45, i - 0.45), 0.9, 0.9, fill=False, ec="black", lw=1.2))
    ax.set_xticks(range(len(p["delays"])), [str(d) for d in p["delays"]], fontsize=6.5)
    ax.set_yticks(range(len(p["rows"])), [_row_label(r) for r in p["rows"]], fontsize=6.5)
    if any(k == "tuned" for k, _ in p["rows"]):
        ax.axhline(len(p["rows"]) - 1.5, color="black", lw=0.8)  # the tuned arm is not on the η/η₀ scale
    ax.grid(False)
    return im


def plot(data: dict, *, G: int, eps: float, vmax: float | None = None, axis: str = "eta"):
    """The heat maps, one per instance, with one colour bar; returns ``(fig, axes)``."""
    n = max(len(data), 1)
    ncol = min(n, 4)
    nrow = math.ceil(n / ncol)
    fig, axes = plt.subplots(nrow, ncol, figsize=(2.55 * ncol + 1.1, 2.35 * nrow + 0.9), squeeze=False,
                             layout="constrained")
    if vmax is None:
        finite = [np.nanmax(np.abs(p["est"])) for p in data.values() if np.isfinite(p["est"]).any()]
        vmax = max(max(finite, default=0.0), 0.02)  # at least the margin, so a null map stays pale
    im = None
    flat = axes.ravel()
    for ax, (inst, p) in zip(flat, data.items()):
        im = draw_panel(ax, p, vmax)
        ax.set_xlabel("delay d", fontsize=7)
        ax.set_ylabel({"eta": "η / η₀ (common arm)", "G": "group size G (η = η₀)", "eps": "ε (η = η₀)"}[axis],
                      fontsize=7)
        ax.set_title(textwrap.fill(inst, 24) + (f"\nη₀ = {p['eta0']:.3g}" if axis == "eta" else ""), fontsize=7)
    for ax in flat[len(data):]:
        ax.set_axis_off()
    if im is not None:
        cb = fig.colorbar(im, ax=axes, shrink=0.85, pad=0.02)
        cb.set_label("nAUC(gmc) − nAUC(onpolicy)", fontsize=7)
        cb.ax.tick_params(labelsize=6.5)
    else:
        common.placeholder(flat[0], "no gmc − onpolicy comparisons in the map")
    where = {"eta": f"G = {G}, ε = {eps:g}; rows: common η = (η/η₀)·η₀, top row: η tuned per cell",
             "G": f"ε = {eps:g}, common η₀ (tuned at d = 0 for each G)", "eps": f"G = {G}, common η₀"}[axis]
    fig.suptitle(f"gmc − onpolicy in nAUC, {where}\n(frame: 95 % paired t-interval excludes 0; †: gmc fails above p₀)",
                 fontsize=7.5)
    return fig, axes


def _primary(m) -> tuple[int, float]:
    p = m.protocol.primary
    Gs, epss = m.settings["G"], m.settings["eps"]
    G = int(p["G"]) if int(p["G"]) in Gs else int(Gs[0])
    eps = float(p["eps"]) if any(math.isclose(float(p["eps"]), e) for e in epss) else float(epss[0])
    return G, eps


def evidence(m, G: int, eps: float) -> list[common.Evidence]:
    """One ``reported`` row per instance: the smallest d at which gmc is significantly ahead of onpolicy at
    f = 1 (the η tuned at d = 0 itself), with both boundaries in the note."""
    b = m.boundary
    b = b[b.arm == "common"] if "arm" in b else b
    rows = []
    for r in b[(b.G == G) & np.isclose(b.eps, eps) & np.isclose(b.eta_factor, 1.0)].itertuples(index=False):
        d = None if pd.isna(r.d_gmc_ahead) else int(r.d_gmc_ahead)
        rows.append(common.Evidence("C9", "regime map: smallest d with gmc − onpolicy > 0 in nAUC (95 % paired t, "
                                    "common η₀ tuned at d = 0)", f"{r.instance}, G={G}, ε={eps:g}, η = η₀", d, None, None,
                                    "reported", NAME, note=f"gmc ahead: {r.gmc_ahead}; onpolicy ahead: {r.onpolicy_ahead}"))
    return rows


def answer_rows(m, G: int, eps: float, delays=(32,)) -> list[dict]:
    """The report's ``"answer"`` rows from the map (each instance's own group, :attr:`report_group`): gmc − rival in nAUC at each d of
    ``delays`` the map has, per instance, on the tuned arm (onpolicy: the map tunes onpolicy and gmc) and on the
    common arm at η = η₀ (f = 1; onpolicy, is, tis, tic), paired by held-out seed, two-sided 95 % t-interval."""
    from simulate import verdicts as vd

    from simulate.protocol.instances import get_instance

    group = lambda inst: get_instance(inst).report_group  # noqa: E731  (an LM-like instance never files as tabular)
    runs = m.runs if "arm" in m.runs else m.runs.assign(arm="common")
    pe, eps_est = float(m.protocol.primary["eps"]), tuple(m.protocol.eps_estimators)
    runs = runs[(runs.G == G) & np.isclose(runs.eta_factor, 1.0)]
    rows = []
    for d in delays:
        for arm, word in (("tuned", "tuned η"), ("common", "common η")):
            sel = runs[(runs.d == d) & (runs.arm == arm)]
            for inst in m.settings["instances"]:
                s = sel[sel.instance == inst]
                at = lambda e: s[(s.estimator == e) & np.isclose(s.eps, eps if e in eps_est else pe)].set_index("seed").nauc  # noqa: E731
                g = at("gmc")
                for x in ("onpolicy", "is", "tis", "tic"):
                    r = at(x)
                    seeds = g.index.intersection(r.index)
                    if len(seeds) < 2:
                        continue
                    mu, lo, hi = vd.t_interval((g[seeds] - r[seeds]).to_numpy())
                    rows.append(dict(group=group(inst), setting=inst, d=int(d), rival=x, arm=word, metric="nAUC", delta=mu,
                                     lo=lo, hi=hi, interval=f"95 % paired t, {len(seeds)} held-out seeds (regime map)",
                                     n=int(len(seeds))))
    return rows


def _records(df) -> list[dict]:
    """Rows as JSON-able dicts (missing values → None)."""
    return [{k: None if pd.isna(v) else common._jsonable(v) for k, v in row.items()}
            for row in df.astype(object).to_dict(orient="records")]


_MAPS: dict = {}


def standard(quick: bool, sweep_opts: dict | None = None):
    """The standard map (:func:`simulate.protocol.regime_map.standard_map`), once per process and size
    (this figure and ``fig_regime_slices`` share it)."""
    from simulate.protocol import regime_map as rm

    if quick not in _MAPS:
        opts = dict(sweep_opts or {})
        if "client" not in opts and "scheduler" not in opts and "dask_local" not in opts:
            opts.setdefault("backend", "local" if int(opts.get("n_workers") or os.cpu_count() or 1) > 1 else "serial")
        _MAPS[quick] = rm.standard_map(quick=quick, **opts)
    return _MAPS[quick]


def main(out_dir, quick: bool = False, sweep_opts: dict | None = None) -> common.FigureResult:
    t0 = time.perf_counter()
    style.apply()
    m = standard(quick, sweep_opts)
    G, eps = _primary(m)
    fig, _ = plot(panel_data(m, G, eps), G=G, eps=eps)
    ev = evidence(m, G, eps)
    comp = m.comparisons
    keep = ["instance", "d", "G", "eps", "arm", "eta_factor", "eta", "comparison", "rival", "kind", "threshold", "n",
            "estimate", "lo", "hi", "verdict", "sign", "nauc_gmc", "nauc_rival", "fail_rate_gmc", "fail_rate_rival",
            # the mechanism columns (issue 24 item 3): why a cell goes one way
            "chi2_learn_gmc", "chi2_learn_rival", "ess_early_gmc", "ess_early_rival", "entropy_final_gmc",
            "entropy_final_rival", "gmc_locked_in", "onpolicy_locked_in", "gmc_collapsed", "onpolicy_collapsed"]
    prim = comp[[c for c in keep if c in comp.columns]]  # the d × η grid and the G and ε slices
    meta = common.sidecar(NAME, quick=quick, settings=dict(m.settings, primary_G=G, primary_eps=eps),
                          seeds=dict(tune=list(m.protocol.tune_seeds), eval=m.settings["seeds"]), sweeps=m.sweeps,
                          evidence=ev)
    meta.update(caption=CAPTION, boundary=_records(m.boundary), comparisons=_records(prim),
                etas=_records(m.etas), interval="two-sided 95 % paired t over the held-out seeds, per cell",
                kinds={"gmc − onpolicy": "superiority (threshold +margin)",
                       "gmc − best stable": "noninferiority (threshold −margin)",
                       "gmc − best rival": "noninferiority (threshold −margin), every rival (v4)"},
                answer=answer_rows(m, G, eps))
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
