"""Verdicts that survive the CPU: the LM protocol's comparisons re-made under other ATen kernel paths.

The same config on the same commit gives the same numbers on one CPU, but another CPU's SIMD kernels
(``ATEN_CPU_CAPABILITY``: ``default``, ``avx2``, ``avx512``) sum in other orders; a last-bit change makes
the sampler draw another token now and then and the runs drift apart, so a verdict near its threshold
can flip with the machine (issue 35: two v3 statements did). This module re-runs, in one subprocess per
kernel path with the variable set (warm start included, in its own cache), the runs the registered
parts need — the shared ``d = 0`` run and every estimator at ``d_max`` — on ``protocol.perturb_seeds``,
and compares every part's verdict (the Holm family, the rate checks, the claim) and the overlap-regime
label with the native run's on the same seeds. A part whose verdict or label differs under any path
is **fragile**. Paths the CPU lacks (torch then runs another one) are listed as not available, not run.

``python -m simulate.llm.portability.perturbation --capability avx2 --out DIR --protocol PROTOCOL.json [--quick]`` is the
subprocess's entry point (it writes ``DIR/results.csv`` and ``DIR/capability.txt``).

**Version 7**: the runs are float64 from a frozen warm start on the CPU's own path (no pin); the same check
re-makes ``perturb_seeds`` on ``perturb_paths`` and also measures how far the re-made runs are from the
reference ones (:func:`identity`).

**Version 5** (:mod:`simulate.llm.protocol`): the runs are made on the pinned kernel path
(``protocol.kernel_pin``, :mod:`simulate.llm.portability.kernel_paths`) and the check is a sensitivity check. Every path
of ``protocol.perturb_paths`` (``"<aten>+<mkl>"``) re-makes the same runs on ``perturb_seeds`` in a child
process started with that path; its runs are *substituted* for the pinned runs of those seeds in the full
table, and every part is re-decided on the substituted table (:func:`perturb_v5`). A part is fragile when
some substituted table gives another verdict or label; under the consensus rule
(:func:`apply_consensus`) its reported verdict is then ``inconclusive`` with the note "kernel-fragile:
<path> gives <verdict>". ``python -m simulate.llm.portability.perturbation --sweep SWEEP.json --path SPEC`` is the child
that runs any sweep under a path (:func:`run_under`: also the pinned protocol sweep itself, when the
calling process does not run the pin).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time

import pandas as pd

from simulate import verdicts as vd
from simulate.llm import experiment as ex
from simulate.llm.portability import kernel_paths
from simulate.llm.portability.sweep_on_path import finish_under, run_under, start_under  # noqa: F401 (re-exported)
from simulate.llm.protocol import CPU_CAPABILITIES, LMProtocol

#: Environment variable that selects ATen's CPU kernel path.
ENV = "ATEN_CPU_CAPABILITY"
#: The label row of the table (the regime is not a verdict but a label read from an interval).
REGIME_PART = "overlap regime of gmc at d_max"


def effective_capability(requested: str | None = None) -> str:
    """The kernel path torch uses with ``ATEN_CPU_CAPABILITY=requested`` (``None``: as this process runs),
    lower case; torch falls back to what the CPU has when it lacks the requested one."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    if requested is None:
        import torch

        return torch.backends.cpu.get_cpu_capability().lower()
    env = {**os.environ, ENV: requested}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return out.stdout.strip().lower()


def perturb_pairs(protocol: LMProtocol) -> tuple[tuple[str, int], ...]:
    """The runs the registered parts need: the shared ``d = 0`` run and every estimator at ``d_max``."""
    return ((protocol.baseline, 0),) + tuple((x, protocol.d_max) for x in protocol.estimators)


def perturb_sweep(protocol: LMProtocol, out_dir: str, quick: bool = False):
    """The sweep one kernel path runs: :func:`perturb_pairs` on ``perturb_seeds`` (quick: the first quick
    seed pair), with its own warm-start cache under ``out_dir``."""
    seeds = tuple(protocol.quick_seeds) if quick else tuple(protocol.perturb_seeds)
    p = protocol.variant(quick)
    return ex.Sweep(estimators=p.estimators, delays=(0, p.d_max), seeds=seeds,
                    base=ex.protocol_base(p, quick, cache_dir=os.path.join(out_dir, "cache")), out_dir=out_dir,
                    pairs=perturb_pairs(p))


def parts(df: pd.DataFrame, protocol: LMProtocol, quick: bool = False) -> dict[str, str]:
    """``{part: verdict or label}``: every comparison and rate of :func:`simulate.llm.analysis.c9_result`, the
    claim, and the overlap-regime label (:func:`simulate.llm.analysis.regime`)."""
    from simulate.llm import analysis

    res = analysis.c9_result(df, protocol, quick=quick)
    out = {c.name: c.verdict for c in res.comparisons}
    out.update({r.name: r.verdict for r in res.rates})
    out["C9 (all parts)"] = res.verdict
    out[REGIME_PART] = analysis.regime(df, protocol.variant(quick))["label"]
    return out


def protocol_from_dict(d: dict) -> LMProtocol:
    """:meth:`LMProtocol.to_dict` back to the protocol (JSON lists to tuples)."""
    return LMProtocol(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})


def run_paths(protocol: LMProtocol, root: str, capabilities, *, quick: bool = False) -> dict:
    """Run :func:`perturb_sweep` under each kernel path in ``capabilities`` (subprocesses, concurrently;
    each one thread); ``{path: results table}``. Raises ``RuntimeError`` with the subprocess's last lines
    when one fails."""
    os.makedirs(root, exist_ok=True)
    spec = os.path.join(root, "protocol.json")
    with open(spec, "w") as f:
        json.dump(protocol.to_dict(), f)
    procs = {}
    for cap in capabilities:
        out = os.path.join(root, cap)
        os.makedirs(out, exist_ok=True)
        cmd = [sys.executable, "-m", "simulate.llm.portability.perturbation", "--capability", cap, "--out", out,
               "--protocol", spec] + (["--quick"] if quick else [])
        log = open(os.path.join(out, "log.txt"), "w")
        procs[cap] = (subprocess.Popen(cmd, env={**os.environ, ENV: cap}, stdout=log, stderr=subprocess.STDOUT), log)
    tables = {}
    for cap, (p, log) in procs.items():
        rc = p.wait()
        log.close()
        if rc != 0:
            with open(os.path.join(root, cap, "log.txt")) as f:
                tail = "".join(f.readlines()[-15:])
            raise RuntimeError(f"perturbation run under {ENV}={cap} failed (exit {rc}):\n{tail}")
        tables[cap] = pd.read_csv(os.path.join(root, cap, "results.csv"))
    return tables


def perturb(native: pd.DataFrame, protocol: LMProtocol, root: str, *, quick: bool = False,
            capabilities=None) -> dict:
    """The perturbation check (module docstring). ``native``: the protocol's results table of this process
    (restricted here to the perturbation's seeds and runs). Returns ``paths`` (requested, effective, ran),
    ``parts`` (one row per part: its verdict natively and under each path that ran, and ``fragile``),
    ``fragile`` (the fragile parts), ``seeds``, ``seconds``."""
    if protocol.version >= 5 and capabilities is None:
        return perturb_v5(native, protocol, root, quick=quick)
    t0 = time.perf_counter()
    requested = tuple(capabilities if capabilities is not None else protocol.perturb_capabilities)
    bad = [c for c in requested if c not in CPU_CAPABILITIES]
    if bad:
        raise ValueError(f"capabilities must be among {', '.join(CPU_CAPABILITIES)}, got {bad!r}")
    here = effective_capability()
    paths, todo = [], []
    for c in requested:
        eff = effective_capability(c)
        ran = eff == c and c != here
        paths.append(dict(requested=c, effective=eff, ran=ran,
                          note="the native run" if c == here else "" if ran else f"not on this CPU (torch runs {eff})"))
        if ran:
            todo.append(c)
    sw = perturb_sweep(protocol, os.path.join(root, "native"), quick)
    keep = {f"{x}:{d}" for x, d in sw.pairs}
    nat = native[native["seed"].isin(sw.seeds) & (native["estimator"] + ":" + native["d"].astype(str)).isin(keep)]
    tables = run_paths(protocol, root, todo, quick=quick)
    verdicts = {here: parts(nat, protocol, quick)} | {c: parts(t, protocol, quick) for c, t in tables.items()}
    rows = compare(verdicts, here)
    return dict(native=here, paths=paths, parts=rows, fragile=[r["part"] for r in rows if r["fragile"]],
                seeds=list(sw.seeds), runs=[f"{x}@d={d}" for x, d in sw.pairs], seconds=time.perf_counter() - t0)


def _slug(spec: str) -> str:
    return spec.replace("+", "_")


def substitute(table: pd.DataFrame, path_table: pd.DataFrame, seeds, pairs) -> pd.DataFrame:
    """``table`` with the runs of ``seeds`` × ``pairs`` replaced by ``path_table``'s (the same runs made on
    another kernel path); raises ``ValueError`` when ``path_table`` lacks one of them."""
    key = lambda df: df["estimator"] + ":" + df["d"].astype(str)  # noqa: E731
    want = {f"{x}:{d}" for x, d in pairs}
    sub = path_table[path_table["seed"].isin(seeds) & key(path_table).isin(want)]
    if len(sub) != len(seeds) * len(want):
        raise ValueError(f"the perturbed table has {len(sub)} of the {len(seeds) * len(want)} runs to substitute")
    keep = table[~(table["seed"].isin(seeds) & key(table).isin(want))]
    return pd.concat([keep, sub[[c for c in table.columns if c in sub.columns]]], ignore_index=True)


def perturb_v5(table: pd.DataFrame, protocol: LMProtocol, root: str, *, quick: bool = False) -> dict:
    """The v5 perturbation check (module docstring): ``table`` is the protocol's results table on its pinned
    path. Returns ``reference`` (the pin), ``paths``, ``parts`` (each part's verdict on the pinned table and on
    every substituted one, ``fragile``, and the ``reported`` verdict with its ``note`` by the consensus
    rule), ``fragile``, ``seeds``, ``runs``, ``method``, ``seconds``."""
    t0 = time.perf_counter()
    todo, paths = [], []
    code = "import torch; print(torch.backends.cpu.get_cpu_capability().lower())"
    for spec in protocol.perturb_paths:
        aten = kernel_paths.parse_path(spec)[kernel_paths.ATEN_VAR]
        eff = subprocess.run([sys.executable, "-c", code], env=kernel_paths.path_env(spec), capture_output=True,
                             text=True, check=True).stdout.strip()
        ok = aten is None or eff == aten
        paths.append(dict(requested=spec, effective=eff, ran=ok, note="" if ok else f"not on this CPU (torch runs {eff})"))
        if ok:
            todo.append(spec)
    procs = {}
    for spec in todo:
        sw = perturb_sweep(protocol, os.path.join(root, _slug(spec)), quick)
        sw = dataclasses.replace(sw, base=sw.base.replace(kernels=spec))
        log = os.path.join(root, _slug(spec) + ".log")
        os.makedirs(root, exist_ok=True)
        procs[spec] = (start_under(sw, spec, data=ex.sweep_to_dict(sw), log=log, backend="serial"), sw, log)
    ref = protocol.kernel_pin or "native"
    verdicts = {ref: parts(table, protocol, quick)}
    seeds, pairs, same = None, None, {}
    for spec, (proc, sw, log) in procs.items():
        seeds, pairs = sw.seeds, sw.pairs
        got = finish_under(proc, sw, spec, log)
        verdicts[spec] = parts(substitute(table, got, sw.seeds, sw.pairs), protocol, quick)
        same[spec] = identity(table, got, sw.seeds, sw.pairs)
    if seeds is None:
        sw = perturb_sweep(protocol, root, quick)
        seeds, pairs = sw.seeds, sw.pairs
    rows = compare(verdicts, ref)
    for r in rows:
        moved = [(c, r[c]) for c in verdicts if c != ref and r[c] != r[ref]]
        r["reported"] = vd.INCONCLUSIVE if moved and protocol.consensus else r[ref]
        r["note"] = "; ".join(f"kernel-fragile: {c} gives {v}" for c, v in moved)
    return dict(reference=ref, native=ref, paths=paths, parts=rows, fragile=[r["part"] for r in rows if r["fragile"]],
                identity=same, pinned=bool(protocol.kernel_pin),
                seeds=list(seeds), runs=[f"{x}@d={d}" for x, d in pairs], seconds=time.perf_counter() - t0,
                method=f"runs of seeds {list(seeds)} made on each path substituted for the pinned ones in the full "
                       f"table; every part re-decided on it" + ("; consensus rule" if protocol.consensus else ""))


#: Columns of a run's row that make its discrete record: a run re-made on another path is *equal* when these
#: are equal (the held-out accuracies at every evaluation enter through ``auc``).
DISCRETE = ("initial_acc", "final_acc", "auc", "failure")


#: χ̂² at or below this is round-off of an exact 0 (μ = π: ρ − 1 ~ 1e-15, so χ̂² ~ 1e-30), far below any real
#: overlap gap (stale runs: χ̂² ≳ 1e-3); :func:`identity` compares those absolutely, not relatively.
CHI2_ROUNDOFF = 1e-12


def identity(table: pd.DataFrame, path_table: pd.DataFrame, seeds, pairs) -> dict:
    """How far the runs of ``seeds`` × ``pairs`` re-made on another path (``path_table``) are from the same runs
    in ``table``: ``runs`` compared, ``equal`` (every :data:`DISCRETE` column equal), ``max_abs_auc`` (largest
    ``|Δ auc|``), ``max_rel_chi2`` (largest ``|Δχ̂²| / |χ̂²|`` of the learning-phase median over the runs whose
    χ̂² exceeds :data:`CHI2_ROUNDOFF`) and ``max_abs_chi2_roundoff`` (largest ``|Δχ̂²|`` over the others: where
    μ = π, e.g. onpolicy at d = 0, χ̂² is round-off of an exact 0, ~1e-30, whose relative gap means nothing)."""
    key = ["estimator", "d", "seed"]
    want = {f"{x}:{d}" for x, d in pairs}
    pick = lambda df: df[df["seed"].isin(seeds) & (df["estimator"] + ":" + df["d"].astype(str)).isin(want)]  # noqa: E731
    m = pick(table).merge(pick(path_table), on=key, suffixes=("", "_p"))
    if m.empty:
        return dict(runs=0, equal=0, max_abs_auc=float("nan"), max_rel_chi2=float("nan"),
                    max_abs_chi2_roundoff=float("nan"))
    eq = pd.Series(True, index=m.index)
    for c in DISCRETE:
        eq &= (m[c] == m[c + "_p"]) | (m[c].isna() & m[c + "_p"].isna())
    a, b = m["chi2_learn_med"].astype(float), m["chi2_learn_med_p"].astype(float)
    both = a.notna() & b.notna()
    big = both & (a.abs() > CHI2_ROUNDOFF)
    rel, small = ((a - b).abs() / a.abs())[big], (a - b).abs()[both & ~big]
    return dict(runs=int(len(m)), equal=int(eq.sum()), max_abs_auc=float((m["auc"] - m["auc_p"]).abs().max()),
                max_rel_chi2=float(rel.max()) if len(rel) else float("nan"),
                max_abs_chi2_roundoff=float(small.max()) if len(small) else float("nan"))


def apply_consensus(result, regime: dict, pert: dict):
    """The reported C9 result and regime under v5's consensus rule: each part's verdict (and the regime label)
    replaced by ``pert``'s ``reported`` one, the fragile parts' notes added, and the claim's verdict
    :func:`simulate.verdicts.combine` of the reported parts. Returns ``(result, regime)``."""
    rep = {r["part"]: r for r in pert["parts"]}
    fix = lambda x: dataclasses.replace(x, verdict=rep[x.name]["reported"]) if x.name in rep else x  # noqa: E731
    comps, rates = tuple(fix(c) for c in result.comparisons), tuple(fix(r) for r in result.rates)
    parts_ = [c.verdict for c in comps] + [r.verdict for r in rates]
    notes = tuple(f"{r['part']}: {r['note']} (reported {r['reported']})" for r in pert["parts"] if r["note"])
    out = dataclasses.replace(result, comparisons=comps, rates=rates,
                              verdict=vd.combine(parts_) if parts_ else result.verdict, notes=result.notes + notes)
    reg = dict(regime)
    if REGIME_PART in rep and rep[REGIME_PART]["note"]:
        reg.update(label=rep[REGIME_PART]["reported"], note=rep[REGIME_PART]["note"])
    return out, reg


def compare(verdicts: dict[str, dict[str, str]], native: str) -> list[dict]:
    """One row per part of ``verdicts[native]``: its verdict or label under every path (``"—"`` where a path
    has no such part) and ``fragile``: whether they are not all the same."""
    rows = []
    for name in verdicts[native]:
        per = {c: verdicts[c].get(name, "—") for c in verdicts}
        rows.append(dict(part=name, **per, fragile=len(set(per.values())) > 1))
    return rows


def chi2_gaps(i: dict) -> str:
    """The χ̂² part of an :func:`identity` result as text (results before the round-off floor lack its key)."""
    text = f"largest relative |Δ χ̂²| {i['max_rel_chi2']:.3g}"
    if "max_abs_chi2_roundoff" in i:
        text += f" (runs with χ̂² > {CHI2_ROUNDOFF:g})"
        if not math.isnan(i["max_abs_chi2_roundoff"]):  # some runs are at round-off
            text += f", largest |Δ χ̂²| {i['max_abs_chi2_roundoff']:.3g} where χ̂² ≤ {CHI2_ROUNDOFF:g} (μ = π)"
    return text


def table(result: dict) -> str:
    """The perturbation result as text: one line per part, its verdict under each kernel path."""
    ref = result.get("reference", result["native"])
    cols = [ref] + [p["requested"] for p in result["paths"] if p["ran"]]
    what = (f"pinned path {ref}" if result.get("pinned", True) else "the CPU's own path") if "reference" in result \
        else f"native path {ref}"
    lines = [f"perturbation check (seeds {result['seeds']}, runs {', '.join(result['runs'])}; {what}): fragile "
             f"parts {len(result['fragile'])} of {len(result['parts'])}"]
    if "method" in result:
        lines.append(f"  ({result['method']})")
    lines += [f"  {r['part']}: " + ", ".join(f"{c} {r[c]}" for c in cols) + (" — FRAGILE" if r["fragile"] else "")
              + (f" → reported {r['reported']}" if "reported" in r else "") for r in result["parts"]]
    lines += [f"  {p['requested']}: {p['note']}" for p in result["paths"] if not p["ran"]]
    lines += [f"  {c}: {i['equal']} of {i['runs']} re-made runs equal the reference run (initial and final accuracy, "
              f"AUC, failure); largest |Δ AUC| {i['max_abs_auc']:.3g}, {chi2_gaps(i)}"
              for c, i in result.get("identity", {}).items()]
    return "\n".join(lines)


def run_and_print(df: pd.DataFrame, protocol: LMProtocol, root: str) -> dict:
    """``python -m simulate.llm experiment --perturb``: :func:`perturb` of the main arm of ``df`` under ``root``, its
    table printed and, under the consensus rule (v5), the reported verdicts and regime; returns the check's result."""
    if protocol.version < 4 or not protocol.perturb_seeds:
        raise ValueError(f"--perturb needs a protocol with perturb_seeds (version 4 or later), got version {protocol.version}")
    main_arm = ex.arm(df, 1.0)
    res = perturb(main_arm, protocol, root)
    print(table(res))
    if protocol.version >= 5 and protocol.consensus:
        from simulate.llm import analysis

        rep, reg = apply_consensus(analysis.c9_result(main_arm, protocol), analysis.regime(main_arm, protocol), res)
        print("reported under the consensus rule (a part that moves on a perturbed kernel path is inconclusive):")
        print("\n".join(rep.lines))
        print(analysis.regime_line(reg, protocol.d_max))
    return res


def main(argv: list[str] | None = None) -> int:
    """Subprocess entry point: run :func:`perturb_sweep` under this process's kernel path (v4, ``--capability``),
    or any sweep under a v5 kernel path (``--sweep``/``--path``, :func:`run_under`)."""
    p = argparse.ArgumentParser(prog="python -m simulate.llm.portability.perturbation", description=__doc__.splitlines()[0])
    p.add_argument("--capability", choices=CPU_CAPABILITIES)
    p.add_argument("--out")
    p.add_argument("--protocol", help="the protocol as JSON (LMProtocol.to_dict)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--sweep", help="v5: a sweep as JSON (sweep_to_dict), run under --path")
    p.add_argument("--path", help="v5: the kernel path this process must run ('<aten>+<mkl>')")
    p.add_argument("--root", default=None)
    p.add_argument("--backend", default=None)
    p.add_argument("--workers", type=int, default=None)
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--progress", action="store_true")
    a = p.parse_args(argv)
    if a.sweep:
        if not a.path:
            raise SystemExit("error: --sweep needs --path")
        why = kernel_paths.running(a.path)
        if why:
            raise SystemExit(f"error: {why}")
        with open(a.sweep) as f:
            sw = ex.sweep_from_dict(json.load(f))
        ex.run(sw, progress=a.progress, root=a.root, backend=a.backend, overwrite=a.overwrite,
               **({"n_workers": a.workers} if a.workers else {}))
        with open(os.path.join(sw.out_dir, "kernels.json"), "w") as f:
            json.dump(kernel_paths.kernel_state(), f)
        return 0
    if not (a.capability and a.out and a.protocol):
        raise SystemExit("error: --capability, --out and --protocol are required (or --sweep and --path)")
    with open(a.protocol) as f:
        protocol = protocol_from_dict(json.load(f))
    eff = effective_capability()
    if eff != a.capability:
        raise SystemExit(f"error: {ENV}={a.capability} requested but torch runs {eff}")
    sw = perturb_sweep(protocol, a.out, a.quick)
    ex.run(sw, progress=False, backend="serial")
    with open(os.path.join(a.out, "capability.txt"), "w") as f:
        f.write(eff + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
