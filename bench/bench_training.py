"""Throughput of the training learner (:func:`simulate.training.run_many`, one Numba kernel) against a NumPy
reference of the same learner (:mod:`bench.reference_learner`), in the same run (issue 24 item 5).

Each instance runs the protocol's primary cell: estimator ``gmc``, ``ε = 0.2``, ``G = 8``, one prompt, a
fixed delay ``d = 8`` (``μ_k = π_{θ_{k−8}}``), ``K`` SGD steps, one run per seed. A learner step is the whole
of step ``k``: divergence checks, exact ``J``/``∇J``/``χ²``/overlap diagnostics by DP, sampling the ``N = G``
trajectories from ``μ_k``, weights, ``ĝ = (1/N) Σ_n A_n w_n s_θ(τ_n)``, issue 33's ascent rates (``ĝ`` and its
negative part projected on ``∇J``) and the update: the same work on both sides (the reference computed no ascent
rates before 2026-12-07, so earlier ratios compared the kernel's larger step with the reference's smaller one). Instances:
``count-frac`` (small: V = 3, T = 6, 126 logits), ``count-long-bernoulli`` (large: V = 8, T = 12, 1248
logits), ``feature-lm-bernoulli`` (log-linear ``θ = Φw``, p = 32 over 2176 logits) and ``ladder-v16-t12``
(:func:`ladder_instance`: the toy-to-LM ladder's size, V = 16, T = 12, shared parameters p = 32 over 3264
logits, Bernoulli reward).

After the timings, the per-phase profile of a learner step (:func:`simulate.training.profile.profile_phases`:
the kernel's phases with a clock read between them, one thread) on every instance: where the time goes; and the
step's total with ``TrainConfig(diagnostics=False)``, as the protocol's cells run it.

Rows: the Numba learner at 1 and 2 threads (``numba.set_num_threads``; ``R`` runs in one kernel call, so
``prange`` has runs for both threads), best of ``repeats`` after a warm-up call (Numba's compile or cache
load excluded), and the NumPy reference on the first ``R_ref`` of the same configurations (one process,
one run after another), best of 2. Rates are per run-step, so the two sides may use different numbers of
runs: learner steps/s (wall), the same per core (÷ threads) and as trajectories/s per core (× N), and
steps per CPU-second (process CPU time: what the computation costs when it runs, whatever else holds
the machine). Only steps actually made count (a diverged run stops early).

Targets (quiet machine, ratios of one run): Numba at 1 thread ≥ 20× the NumPy reference per core on every
instance (issue 59: the regression guard, one PASS/FAIL line per instance; a benchmark, not a timed test), and
≥ 1.8× from 1 to 2 threads; the 1- and 2-thread runs must give bit-identical ``J`` curves (each run seeds
its own generator). The load average is printed: other processes slow every row, and the thread
scaling row means little when ``load ≳ cores``.
"""
from __future__ import annotations

import os

import numba
import numpy as np

from bench import best_of
from bench import reference_learner as ref
from simulate.delays import DelaySpec
from simulate.protocol.instances import get_instance
from simulate.training import TrainConfig, run_many

#: (instance, η): the η keeps the runs of the timed budget finite (a diverged run would stop early).
INSTANCES = (("count-frac", 1.0), ("count-long-bernoulli", 1.0), ("feature-lm-bernoulli", 2.0), ("ladder-v16-t12", 2.0))
TARGET_VS_NUMPY = 20.0  # issue 59 (issue 24 item 5 asked 30×)
TARGET_SCALING = 1.8


def ladder_instance():
    """The ladder-sized bench instance (issue 37): previous-token state, V = 16, T = 12, the LM-like log-linear
    policy of ``feature-lm-bernoulli`` (``θ[t,s,a] = e_aᵀWe_s + b_a``, p = 32, shared across positions and
    tokens), random bigram rewards (seed 5) paid as a coin flip; one start state."""
    from simulate.protocol.instances import TrainingInstance, bigram_rewards, prev_token_mdp, token_state_features

    V, T, m = 16, 12, 4
    ns, s0 = prev_token_mdp(V, T)
    return TrainingInstance("ladder-v16-t12", "ladder-sized LM-like log-linear policy, V = 16, T = 12, p = 32",
                            ns, np.zeros(V + 1), s0, step_reward=bigram_rewards(V, T, 5),
                            features=token_state_features(V, T, m, 5), bernoulli=True)


_LOCAL = {"ladder-v16-t12": ladder_instance}
_BUILT: dict = {}


def _instance(name: str):
    if name in _LOCAL:
        return _BUILT.setdefault(name, _LOCAL[name]())
    return get_instance(name)


def _configs(inst, eta: float, K: int, R: int) -> list[TrainConfig]:
    return [TrainConfig(instance=inst, estimator="gmc", eps=0.2, G=8, n_prompts=1, eta=eta, steps=K,
                        delay=DelaySpec("fixed", d=8), seed=s) for s in range(R)]


def _steps(results) -> int:
    """Learner updates made by a list of runs (``K`` each unless a run diverged first)."""
    return int(sum(r.delays.size if r.diverged_at is None else r.diverged_at for r in results))


def run(quick: bool = False, K: int | None = None, R: int | None = None, R_ref: int | None = None,
        repeats: int | None = None) -> str:
    """Measure and return the table (module docstring); ``quick`` shrinks every size to a smoke run."""
    K = K or (32 if quick else 256)
    R = R or (4 if quick else 32)
    R_ref = R_ref or (1 if quick else 2)
    repeats = repeats or (1 if quick else 3)
    max_threads = min(2, numba.config.NUMBA_NUM_THREADS)
    load0 = os.getloadavg()
    rows, rate, cpu_rate, same, diverged = [], {}, {}, {}, {}
    old = numba.get_num_threads()
    try:
        for name, eta in INSTANCES:
            inst = _instance(name)
            cfgs = _configs(inst, eta, K, R)
            N = cfgs[0].G * cfgs[0].n_prompts
            curves = {}
            for nt in range(1, max_threads + 1):
                numba.set_num_threads(nt)
                run_many(_configs(inst, eta, 2, 2 * nt), chunk=2 * nt)  # compile / load the cache: not timed
                dt, dc, res = best_of(lambda: run_many(cfgs, chunk=len(cfgs)), repeats)
                n = _steps(res)
                rate[name, nt], cpu_rate[name, nt] = n / dt, n / dc
                curves[nt] = np.stack([r.J for r in res])
                diverged[name] = sum(r.diverged for r in res)
                rows.append(("numba", name, nt, len(cfgs), n, n / dt, n / dt / nt, n * N / dt / nt, n / dc, dt))
            if max_threads >= 2:
                same[name] = np.array_equal(curves[1], curves[2], equal_nan=True)
            ref_cfgs = cfgs[:R_ref]
            ref.train(_configs(inst, eta, 2, 1)[0], inst)  # first-call costs (imports, caches): not timed
            dt, dc, res = best_of(lambda: [ref.train(c, inst) for c in ref_cfgs], 2)
            n = sum(r.steps_done for r in res)
            rate[name, "numpy"], cpu_rate[name, "numpy"] = n / dt, n / dc
            rows.append(("numpy reference", name, 1, len(ref_cfgs), n, n / dt, n / dt, n * N / dt, n / dc, dt))
    finally:
        numba.set_num_threads(old)
    load1 = os.getloadavg()
    ncpu = os.cpu_count() or 1
    busy = max(load0[0], load1[0]) > 0.5 * ncpu

    lines = [
        f"learner steps of gmc, ε = 0.2, G = 8, d = 8, K = {K} steps per run; numba: {R} runs per call, best of "
        f"{repeats}; numpy: {R_ref} run(s), best of 2",
        f"load average (1 min) {load0[0]:.2f} before, {load1[0]:.2f} after, on {ncpu} CPUs"
        + ("  -- busy machine: every timing below is slowed by other processes" if busy else ""),
        "",
        f"{'implementation':<16} {'instance':<21} {'thr':>3} {'runs':>4} {'steps':>6} {'steps/s':>9} "
        f"{'steps/s/core':>12} {'traj/s/core':>11} {'steps/CPU-s':>11} {'seconds':>8}",
    ]
    for impl, name, nt, nr, n, r, rc, tr, rcpu, dt in rows:
        lines.append(f"{impl:<16} {name:<21} {nt:>3} {nr:>4} {n:>6} {r:>9.0f} {rc:>12.0f} {tr:>11.0f} "
                     f"{rcpu:>11.0f} {dt:>8.3f}")
    if any(diverged.values()):
        lines.append("diverged runs (numba, stopped early; only steps made are counted): "
                     + ", ".join(f"{k}: {v}" for k, v in diverged.items() if v))
    lines += ["", f"{'target (issues 24, 59)':<56} {'measured':>9} {'target':>7}  verdict"]

    def verdict(ok: bool, timing: bool = True) -> str:
        note = f"  (load {max(load0[0], load1[0]):.1f} on {ncpu} CPUs: timing not on a quiet machine)" if timing and busy else ""
        return ("PASS" if ok else "FAIL") + note

    for name, _ in INSTANCES:
        ratio = rate[name, 1] / rate[name, "numpy"]
        cpu_ratio = cpu_rate[name, 1] / cpu_rate[name, "numpy"]
        lines.append(f"{'numba 1 thread / numpy, per core, ' + name:<56} {ratio:>8.1f}x {TARGET_VS_NUMPY:>6.0f}x  "
                     f"{verdict(ratio >= TARGET_VS_NUMPY)}  [per CPU-s: {cpu_ratio:.1f}x]")
    if max_threads >= 2:
        for name, _ in INSTANCES:
            sc = rate[name, 2] / rate[name, 1]
            lines.append(f"{'scaling 1→2 threads, ' + name:<56} {sc:>8.2f}x {TARGET_SCALING:>6.1f}x  {verdict(sc >= TARGET_SCALING)}")
        for name, _ in INSTANCES:
            lines.append(f"{'1 vs 2 threads bit-identical J, ' + name:<56} {str(same[name]):>9} {'True':>7}  "
                         f"{verdict(same[name], timing=False)}")
    else:
        lines.append("scaling: only one Numba thread available (NUMBA_NUM_THREADS=1), not measured")
    lines += ["", profile_table(K=min(K, 128), R=min(R, 4))]
    return "\n".join(lines)


def profile_table(K: int = 128, R: int = 4) -> str:
    """µs per learner step of each kernel phase (:data:`simulate.training.profile.PHASES`) on every bench
    instance, 1 thread, ``R`` runs of ``K`` steps of the bench's configuration; the load average beside it."""
    from simulate.training.profile import PHASES, profile_phases

    cols = {name: profile_phases(_instance(name), _configs(_instance(name), eta, K, R)) for name, eta in INSTANCES}
    names = [n for n, _ in INSTANCES]
    out = [f"per-phase profile, µs per learner step (1 thread, {R} runs × {K} steps, counter read "
           f"{max(c['overhead_ns'] for c in cols.values()):.0f} ns subtracted; load {os.getloadavg()[0]:.2f})",
           f"{'phase':<38}" + "".join(f"{n:>22}" for n in names)]
    for ph in PHASES:
        cells = [(cols[n]["phases"][ph], 100 * cols[n]["phases"][ph] / cols[n]["total_us"]) for n in names]
        out.append(f"{ph:<38}" + "".join(f"{us:>15.2f} ({pct:>3.0f}%)" for us, pct in cells))
    out.append(f"{'total':<38}" + "".join(f"{cols[n]['total_us']:>22.2f}" for n in names))
    # the protocol's cells run with diagnostics=False (no C6 overlap, no ascent rates: simulate.protocol.cells)
    off = {name: profile_phases(_instance(name), [c.replace(diagnostics=False)
                                                  for c in _configs(_instance(name), eta, K, R)])["total_us"]
           for name, eta in INSTANCES}
    out.append(f"{'total, diagnostics=False (protocol)':<38}"
               + "".join(f"{off[n]:>15.2f} ({100 * off[n] / cols[n]['total_us']:>3.0f}%)" for n in names))
    return "\n".join(out)
