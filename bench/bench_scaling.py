"""How cost grows with problem size: fitted exponents ``k`` (cost ∝ size^k) and peak memory (issue 18).

Series (each: one size varied, the rest fixed; wall time, best of ``repeats``, Numba compiled first):

- **Monte Carlo kernel** (:func:`simulate.montecarlo.run_mc`, six estimators on the same groups,
  ``ĝ`` tracked and skipped, tables prepared once, ``‖ĝ‖²`` route chosen per call): seconds per group against ``G``, ``T`` and ``V`` of the count-state
  token MDP, and seconds per run against the number of groups. Targets: ``k ≤ 1.1`` in ``G`` and in
  the number of groups (the work is ``G·T`` tokens per group), ``k ≤ 1.1`` in ``T``, ``k ≤ 1.1`` in ``V``
  (sampling is ``O(1)`` per token; only the tables and the bias vector grow with ``V``).
- **Exact engines** (:func:`simulate.montecarlo.exact_expectations`): ``gmc`` on the 3-arm bandit
  against ``G`` (count vectors of a group: ``C(G+2, 2)``, so ``k ≈ 2`` is the floor for any exact
  method that sums over them; target: ``G = 1024`` in < 10 s), and ``tis`` by path sums on the
  2-token MDP against the work ``N·T`` of the path sums (``N = 2^T`` paths of ``T`` steps; target ``k ≤ 1.1``).
- **Training loop** (:func:`simulate.training.run_many`, read-only here): seconds per run against ``G``,
  ``T``, ``V`` and the number of steps ``K`` (target ``k ≤ 1.1`` in each, the work being ``K·G·T``).
- **Peak memory** of one tracked ``run_mc`` at ``T = 128``, ``V = 64`` (512 groups of 16), measured in a
  child process as the growth of its resident-set high-water mark (``resource.ru_maxrss``), since
  Numba's allocations bypass ``tracemalloc``. Target: < 1 GB.

A series stops early once one point takes longer than ``budget_s`` (the row says where); the fit
uses the points measured. ``k`` is the least-squares slope of ``log cost`` on ``log size``
(``scipy.stats.linregress``) over the points at or above the series' ``fit_from`` size, ± its standard error;
verdict ``holds`` if ``k ≤ target``, ``refuted`` if ``k − 2·se > target``, else ``inconclusive``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np
from scipy import stats

ESTIMATORS = ("onpolicy", "is", "tis", "tic", "gmc", "snis")
TARGET_K = 1.1
MEM_TARGET_MB = 1024.0


def _time(fn, repeats):
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def _series(sizes, cost_of, repeats, budget_s):
    """``(sizes measured, costs, note)``: stops after the first point slower than ``budget_s``."""
    xs, ys, note = [], [], ""
    for x in sizes:
        c, dt = cost_of(x, repeats)
        xs.append(x)
        ys.append(c)
        if dt > budget_s:
            if x != sizes[-1]:
                note = f"stopped after {x} ({dt:.1f} s > {budget_s:.0f} s budget)"
            break
    return xs, ys, note


def _fit(xs, ys, fit_from=None):
    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    keep = xs >= (fit_from if fit_from is not None else xs.min())
    if keep.sum() < 2:
        return np.nan, np.nan
    r = stats.linregress(np.log(xs[keep]), np.log(ys[keep]))
    return r.slope, r.stderr


def _mc_series(quick, repeats, budget_s):
    from simulate import instances as ins
    from simulate import montecarlo as mc

    def pair(V, T):
        mdp = ins.token_mdp(V=V, T=T, state="count", reward="count_ge", k=max(1, T // V))
        theta = ins.random_theta(mdp, 0.5, seed=0)
        return mdp, theta, ins.stale_pair(mdp, theta, 4, 0.1)

    tokens = 2**19 if quick else 2**21
    n_chunks = 8

    def per_group(V, T, G, track, n_groups=None):
        mdp, th, thm = pair(V, T)
        prep = mc.prepare(mdp, th, thm)  # once per (θ, θ_μ): O(T·S·V), not per group
        n = n_groups or max(n_chunks, (tokens // (G * T)) // n_chunks * n_chunks)
        mc.run_mc(mdp, th, thm, ESTIMATORS, [0.2], G, n_chunks, seed=0, n_chunks=n_chunks, track_grad=track, prepared=prep)

        def cost(_x, rep):
            dt = _time(lambda: mc.run_mc(mdp, th, thm, ESTIMATORS, [0.2], G, n, seed=1, n_chunks=n_chunks,
                                         track_grad=track, prepared=prep), rep)
            return (dt / n if n_groups is None else dt), dt
        return cost

    rows = []
    Gs = [16, 64, 256, 1024] if quick else [16, 64, 256, 1024, 4096]
    Ts = [8, 16, 32, 64] if quick else [8, 16, 32, 64, 128]
    Vs = [4, 8, 16, 32] if quick else [4, 8, 16, 32, 64]
    Ns = [2048, 8192, 32768] if quick else [4096, 16384, 65536]
    for track in (True, False):
        path = "tracked" if track else "skipped"
        xs, ys, note = _series(Gs, lambda G, rep, track=track: per_group(8, 16, G, track)(G, rep), repeats, budget_s)
        if 16 in xs and 1024 in xs:  # per-token cost is per-group cost / G
            r = (ys[xs.index(1024)] / 1024) / (ys[xs.index(16)] / 16)
            note = (note + "; " if note else "") + f"per-token cost G=1024 / G=16 = {r:.2f} (target ≤ 2)"
        rows.append((f"MC ĝ {path}: s/group vs G", "V=8 T=16", xs, ys, _fit(xs, ys), TARGET_K, note))
        xs, ys, note = _series(Ts, lambda T, rep, track=track: per_group(8, T, 16, track)(T, rep), repeats, budget_s)
        rows.append((f"MC ĝ {path}: s/group vs T", "V=8 G=16", xs, ys, _fit(xs, ys), TARGET_K, note))
        xs, ys, note = _series(Vs, lambda V, rep, track=track: per_group(V, 16, 16, track)(V, rep), repeats, budget_s)
        rows.append((f"MC ĝ {path}: s/group vs V", "T=16 G=16", xs, ys, _fit(xs, ys), TARGET_K, note))
        xs, ys, note = _series(Ns, lambda n, rep, track=track: per_group(8, 16, 16, track, n_groups=n)(n, rep), repeats, budget_s)
        rows.append((f"MC ĝ {path}: s/run vs groups", "V=8 T=16 G=16", xs, ys, _fit(xs, ys), TARGET_K, note))
    return rows


def _exact_series(quick, repeats, budget_s):
    from simulate import instances as ins
    from simulate import montecarlo as mc

    rows = []
    bd = ins.bandit(3, [1.0, 0.4, 0.0])
    th = ins.random_theta(bd, 1.0, seed=0)
    thm = ins.stale_pair(bd, th, 4, 0.15)

    def gmc_cost(G, rep):
        dt = _time(lambda: mc.exact_expectations(bd, th, thm, "gmc", 0.2, G), rep)
        return dt, dt

    Gs = [16, 64, 256, 1024] if quick else [16, 64, 128, 256, 512, 1024]
    xs, ys, note = _series(Gs, gmc_cost, repeats, budget_s)
    fit_from = 64
    note = (note + "; " if note else "") + f"G=1024: {'%.2f s' % ys[-1] if xs[-1] == 1024 else 'not reached'} (target < 10 s)"
    if len(xs) >= 2:  # the fit mixes fixed costs at small G; the last step shows the asymptotic order
        note += f"; local k over the last step {np.log(ys[-1] / ys[-2]) / np.log(xs[-1] / xs[-2]):.2f}"
    rows.append(("exact gmc, 3-arm bandit: s vs G", "(k≈2 floor)", xs, ys, _fit(xs, ys, fit_from), 2.0, note))

    def tis_cost(T, rep):
        mdp = ins.token_mdp(V=2, T=T, state="count", reward="count_ge", k=max(1, T // 2))
        th2 = ins.random_theta(mdp, 0.5, seed=0)
        thm2 = ins.stale_pair(mdp, th2, 4, 0.1)
        dt = _time(lambda: mc.exact_expectations(mdp, th2, thm2, "tis", 0.2, 8), rep)
        return dt, dt

    Ts = [8, 10, 12, 14] if quick else [8, 10, 12, 14, 16, 18]
    xs, ys, note = _series(Ts, tis_cost, repeats, budget_s)
    work = [2**x * x for x in xs]  # N·T: every path is T steps long
    rows.append(("exact tis path sums: s vs 2^T·T", "V=2, G=8", work, ys, _fit(work, ys, 2**10 * 10), TARGET_K, note))
    return rows


def _training_series(quick, repeats, budget_s):
    from simulate.training import InstanceSpec, TrainConfig, run_many

    def cost_of(make):
        def cost(x, rep):
            cfg = make(x)
            run_many([cfg])  # compile
            dt = _time(lambda: run_many([cfg]), rep)
            return dt, dt
        return cost

    def cfg(G=8, T=8, V=4, K=200):
        return TrainConfig(instance=InstanceSpec(kind="token", V=V, T=T, state="count", reward="count_ge",
                                                 k=max(1, T // V)), estimator="gmc", G=G, steps=K, eta=0.5)

    rows = []
    for lab, sizes, make in (
        ("G", [8, 32, 128, 512], lambda x: cfg(G=x)),
        ("T", [4, 8, 16, 32, 64], lambda x: cfg(T=x)),
        ("V", [4, 8, 16, 32], lambda x: cfg(V=x)),
        ("K", [100, 400, 1600], lambda x: cfg(K=x)),
    ):
        xs, ys, note = _series(sizes[:3] if quick else sizes, cost_of(make), repeats, budget_s)
        rows.append((f"training run_many: s/run vs {lab}", "gmc, token count MDP", xs, ys, _fit(xs, ys), TARGET_K, note))
    return rows


_MEM_CHILD = r"""
import json, resource, numpy as np
from simulate import instances as ins, montecarlo as mc
def rss_mb():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * (__import__('os').sysconf('SC_PAGE_SIZE')) / 2**20
T, V, G, n = %d, %d, %d, %d
mdp = ins.token_mdp(V=V, T=T, state="count", reward="count_ge", k=T // V)
th = ins.random_theta(mdp, 0.5, seed=0); thm = ins.stale_pair(mdp, th, 4, 0.1)
small = ins.token_mdp(V=2, T=2, state="count", reward="count_ge", k=1)
mc.run_mc(small, np.zeros(small.theta_shape), np.zeros(small.theta_shape), %r, [0.2], 4, 8, n_chunks=8)
base = rss_mb(); peak0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
res = mc.run_mc(mdp, th, thm, %r, [0.2], G, n, seed=1)
b = res.bias(np.zeros(mdp.theta_shape), 0)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(dict(base=base, peak=peak, peak0=peak0, n_params=int(np.prod(mdp.theta_shape)))))
"""


def _memory(T=128, V=64, G=16, n=512):
    code = _MEM_CHILD % (T, V, G, n, ESTIMATORS, ESTIMATORS)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"memory child failed: {out.stderr[-2000:]}")
    m = json.loads(out.stdout.strip().splitlines()[-1])
    return m["peak"] - max(m["base"], 0.0), m


def run(quick: bool = False, repeats: int | None = None, budget_s: float = 20.0, parts=("mc", "exact", "training", "memory")) -> str:
    """Measure every series and return the table (see the module docstring)."""
    import numba

    repeats = repeats or (1 if quick else 2)
    old = numba.get_num_threads()
    numba.set_num_threads(1)  # exponents per core; thread scaling is bench_montecarlo's job
    rows = []
    try:
        if "mc" in parts:
            rows += _mc_series(quick, repeats, budget_s)
        if "exact" in parts:
            rows += _exact_series(quick, repeats, budget_s)
        if "training" in parts:
            rows += _training_series(quick, repeats, budget_s)
    finally:
        numba.set_num_threads(old)
    load = os.getloadavg()[0]
    lines = [f"Numba 1 thread, best of {repeats}, load average {load:.2f} on {os.cpu_count()} CPUs", "",
             f"{'series':<40} {'fixed':<22} {'sizes':<28} {'k ± se':>13} {'target':>8}  verdict  cost at sizes (s)"]
    for name, fixed, xs, ys, (k, se), target, note in rows:
        if not np.isfinite(k):
            verdict = "inconclusive"
        elif k <= target:
            verdict = "holds"
        else:  # refuted only beyond the fit's own noise (z = 2 on the slope's standard error)
            verdict = "refuted" if k - 2.0 * se > target else "inconclusive"
        size_s = ",".join(str(x) for x in xs)
        cost_s = " ".join(f"{y:.3g}" for y in ys)
        lines.append(f"{name:<40} {fixed:<22} {size_s:<28} {k:>6.2f} ± {se:<4.2f} {'≤ %.1f' % target:>8}  {verdict:<8} {cost_s}"
                     + (f"  [{note}]" if note else ""))
    if "memory" in parts:
        try:
            grow, m = _memory()
            ok = grow < MEM_TARGET_MB
            lines.append("")
            lines.append(f"peak memory, tracked run_mc at T=128 V=64 G=16 (512 groups, {m['n_params']} parameters, 6 estimators): "
                         f"+{grow:.0f} MB over {m['base']:.0f} MB after import (high-water {m['peak']:.0f} MB); "
                         f"target < {MEM_TARGET_MB:.0f} MB: {'holds' if ok else 'refuted'}")
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            lines.append(f"peak memory: not measured ({exc})")
    return "\n".join(lines)
