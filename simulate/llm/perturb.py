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

``python -m simulate.llm.perturb --capability avx2 --out DIR --protocol PROTOCOL.json [--quick]`` is the
subprocess's entry point (it writes ``DIR/results.csv`` and ``DIR/capability.txt``).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import pandas as pd

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
    from simulate.llm import experiment as ex

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
        cmd = [sys.executable, "-m", "simulate.llm.perturb", "--capability", cap, "--out", out,
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


def compare(verdicts: dict[str, dict[str, str]], native: str) -> list[dict]:
    """One row per part of ``verdicts[native]``: its verdict or label under every path (``"—"`` where a path
    has no such part) and ``fragile``: whether they are not all the same."""
    rows = []
    for name in verdicts[native]:
        per = {c: verdicts[c].get(name, "—") for c in verdicts}
        rows.append(dict(part=name, **per, fragile=len(set(per.values())) > 1))
    return rows


def table(result: dict) -> str:
    """The perturbation result as text: one line per part, its verdict under each kernel path."""
    cols = [result["native"]] + [p["requested"] for p in result["paths"] if p["ran"]]
    lines = [f"perturbation check (seeds {result['seeds']}, runs {', '.join(result['runs'])}; native path "
             f"{result['native']}): fragile parts {len(result['fragile'])} of {len(result['parts'])}"]
    lines += [f"  {r['part']}: " + ", ".join(f"{c} {r[c]}" for c in cols) + (" — FRAGILE" if r["fragile"] else "")
              for r in result["parts"]]
    lines += [f"  {p['requested']}: {p['note']}" for p in result["paths"] if not p["ran"]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Subprocess entry point: run :func:`perturb_sweep` under this process's kernel path."""
    from simulate.llm import experiment as ex

    p = argparse.ArgumentParser(prog="python -m simulate.llm.perturb", description=__doc__.splitlines()[0])
    p.add_argument("--capability", required=True, choices=CPU_CAPABILITIES)
    p.add_argument("--out", required=True)
    p.add_argument("--protocol", required=True, help="the protocol as JSON (LMProtocol.to_dict)")
    p.add_argument("--quick", action="store_true")
    a = p.parse_args(argv)
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
