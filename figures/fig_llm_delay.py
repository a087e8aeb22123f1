"""Figure (C9 at LM scale): held-out accuracy of a Qwen3-architecture LM against the rollout delay.

Each point is the mean over seeds of the final greedy held-out accuracy after asynchronous RL (40
steps, 16 prompts × G = 8, η = 3e-4) from one shared cached warm start (tiny random-init model,
2-digit sums, CPU), with a normal CI ``mean ± 1.96·σ̂/√n``; the dashed line is the warm start.
Trajectory-level maps are length-normalised (``w_i/T_i``, ``TrainConfig.length_normalize``) so that
every estimator's step has the scale of the token-level baselines'. C9 predicts that as ``d`` grows
``gmc`` keeps the best accuracy among the stable estimators. The runs are cells of the project's sweep
engine (:func:`simulate.llm.experiment.run` → :func:`asyncgrpo.sweep.run_sweep`), stored under the
figure command's ``--cells`` root (default ``results/llm/<name>/cells``), so an interrupted or
repeated figure run reuses finished runs. Measured on 2 (shared) cores from scratch, warm start included:
default 196 s (90 runs), quick 20 s.
"""
from __future__ import annotations

import math
import os
import time

from figures import common, style

NAME = "fig_llm_delay"
TITLE = "LM held-out accuracy against delay (C9)"
CLAIMS = ("C9",)


def settings(quick: bool = False) -> dict:
    if quick:
        # sized for `python -m figures --quick` (≤ 40 s on 2 cores with its warm start): a weaker
        # 200-step warm start, 2 × 2 runs of 10 steps — checks the path, not C9
        return {"estimators": ["onpolicy", "gmc"], "delays": [0, 8], "seeds": [0], "steps": 10, "lr": 3e-4,
                "warmstart_steps": 200, "warmstart_seed": 0, "n_eval": 100, "preset": "tiny", "task": "arithmetic",
                "digits": 2, "group_size": 8, "prompts_per_step": 8, "length_normalize": True}
    # one shared warm start (seed 0, 400 steps): seeds vary the RL only, so differences are paired;
    # per-seed 300-step warm starts were measured to vary 0.045–0.215 and drown the delay effect.
    # 6 × 3 × 5 = 90 runs of ~3 s each fit the ≤ 6 min share of `python -m figures` on 2 cores.
    return {"estimators": ["onpolicy", "is", "tic", "gmc", "grpo", "cispo"], "delays": [0, 4, 8],
            "seeds": [0, 1, 2, 3, 4], "steps": 40, "lr": 3e-4, "warmstart_steps": 400, "warmstart_seed": 0,
            "n_eval": 200, "preset": "tiny", "task": "arithmetic", "digits": 2, "group_size": 8,
            "prompts_per_step": 16, "length_normalize": True}


def sweep(quick: bool = False, results_root: str = "results"):
    from simulate.llm import experiment as ex
    from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig

    s = settings(quick)
    base = TrainConfig(steps=s["steps"], lr=s["lr"], warmstart_seed=s["warmstart_seed"], threads=1, eval_every=10_000,
                       max_delay=max(s["delays"]), preset=s["preset"], length_normalize=s["length_normalize"],
                       group_size=s["group_size"], prompts_per_step=s["prompts_per_step"],
                       task=TaskConfig(task=s["task"], digits=s["digits"], n_eval=s["n_eval"]),
                       warmstart=WarmStartConfig(steps=s["warmstart_steps"]),
                       cache_dir=os.path.join(results_root, "llm", "cache"))
    return ex.Sweep(estimators=tuple(s["estimators"]), delays=tuple(s["delays"]), seeds=tuple(s["seeds"]), base=base,
                    out_dir=os.path.join(results_root, "llm", NAME + ("_quick" if quick else "")))


def plot(summary, warm_start_acc: float | None = None, ax=None):
    """Mean final accuracy ± CI against delay, one line per estimator; returns ``(fig, ax)``.

    ``summary`` is :func:`simulate.llm.experiment.summarise` output (columns estimator, delay, mean, half_ci).
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(style.WIDTH_2COL * 0.45, 2.6)) if ax is None else (ax.figure, ax)
    for name in style.ordered(summary["estimator"].unique()):
        s = summary[summary.estimator == name].sort_values("delay")
        ax.errorbar(s["delay"], s["mean"], yerr=s["half_ci"], color=style.color(name), marker=style.marker(name),
                    capsize=2, label=name)
    if warm_start_acc is not None:
        ax.axhline(warm_start_acc, color=style.REFERENCE, ls="--", lw=0.8, label="warm start")
    ax.set_xlabel("delay $d$ (policy versions)")
    ax.set_ylabel("held-out accuracy (greedy)")
    ax.legend(loc="best", fontsize=6)
    return fig, ax


def evidence(df) -> list[common.Evidence]:
    """C9 at LM scale, straight from :func:`simulate.llm.experiment.c9_result` (paired t over seeds)."""
    from simulate.llm import experiment as ex

    r = ex.c9_result(df)
    if r.verdict == "not evaluated":
        return []
    what = f"gmc − {r.rival} (best stable rival)" if r.rival else "gmc stability"
    return [common.Evidence("C9", f"LM scale: final held-out accuracy {what}", f"tiny Qwen3, d={r.d}, {r.n} seeds",
                            None if math.isnan(r.gap) else r.gap, None if math.isnan(r.se) else r.se, None,
                            r.verdict, NAME, note=r.line)]


def main(out_dir, quick: bool = False, *, results_root: str = "results",
         sweep_opts: dict | None = None) -> common.FigureResult:
    """Run (or reuse) the LM sweep, draw the figure, save PNG+PDF+JSON, return the C9 evidence.

    Per-run metrics and the warm-start cache live under ``results_root/llm/`` (git-ignored);
    ``sweep_opts`` (from ``python -m figures``: cells ``root``, ``n_workers``, Dask ``client``,
    ``progress``) go to the sweep engine.
    """
    t0 = time.perf_counter()
    style.apply()
    try:
        from simulate.llm import experiment as ex
    except ImportError as exc:  # the [llm] extra (torch, transformers) is not installed: say so, invent nothing
        return common.unavailable(NAME, out_dir, quick, settings(quick), f"not available: {exc}", t0)
    sw = sweep(quick, results_root)
    opts = dict(sweep_opts or {})
    if "root" in opts:
        opts["root"] = str(opts["root"])
    df = ex.run(sw, **opts)
    fig, _ = plot(ex.summarise(df), warm_start_acc=float(df.groupby("seed")["initial_acc"].first().mean()))
    fig.tight_layout()
    ev = evidence(df)
    meta = common.sidecar(NAME, quick=quick, settings=settings(quick), seeds=list(sw.seeds),
                          sweeps=[sw.out_dir], evidence=ev)
    from figures.report import tag

    meta["evidence"] = tag(ev, "LM scale (tiny Qwen3)")
    meta["table"] = ex.table(df)
    meta["c9"] = ex.c9_verdict(df)
    return common.FigureResult(NAME, common.save(fig, out_dir, NAME, meta), ev, [], time.perf_counter() - t0)
