"""``make verify``: re-make numbers on other kernel paths and compare (issue 59); the report stamps the last result.

Two checks that cannot move a shown number on one machine, so they left ``make run``, but can on another CPU or
library version — run it after changing either, and before trusting a report made elsewhere:

- **LM** (:mod:`simulate.llm.portability.perturbation`): the report's LM protocol's ``perturb_seeds`` re-made on each of its
  ``perturb_paths`` (other ATen / MKL kernel paths, in child processes, from the same frozen warm start), every
  registered part re-decided on the substituted table, and the re-made runs compared with the reference runs
  (how many equal it in every held-out accuracy, AUC and failure). Needs the LM sweep of ``make run`` (re-used, or
  run here).
- **Numba**: protocol v6's cells for :data:`NUMBA_CELLS` (the first draw of each family; quick budget) computed
  in a child process with ``NUMBA_CPU_NAME=generic`` (no host-specific instructions, no FMA contraction) and in one
  on the host's own target; every per-run nAUC and failure flag compared.

The result goes to :data:`STAMP` (date, commit, the numbers above, ``ok``), which the report's head quotes. Exit 1
when a part's verdict moves or a failure flag differs (a last-bit difference alone is reported, not a failure).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
from pathlib import Path

from figures.report.verify_stamp import STAMP, load_stamp, stamp_line

ROOT = Path(__file__).resolve().parents[1]
#: (family, estimator, d) of the Numba comparison: protocol v6's first draw of each family, its primary rivals.
NUMBA_CELLS: tuple[tuple[str, str, int], ...] = (("tabular", "gmc", 32), ("tabular", "tis", 8),
                                                 ("lm-like", "gmc", 32), ("lm-like", "verl_tok_tis", 8))


def numba_cells() -> list[dict]:
    """Per-run nAUC and failure of :data:`NUMBA_CELLS` on protocol v6's quick settings (this process's target)."""
    from simulate.protocol import catalog, cells, families
    from simulate.protocol.spec import V6_PATH, load_protocol

    proto = load_protocol(V6_PATH, quick=True)
    eps, G = float(proto.primary["eps"]), int(proto.primary["G"])
    out = []
    for fam, est, d in NUMBA_CELLS:
        name = next(n for n in proto.instances if families.parse_name(n)[0] == fam)
        df = cells.run_cell(catalog.get_instance(name), est, d, eps, G, proto)
        for r in df.to_dict(orient="records"):
            out.append(dict(cell=f"{name}/{est}/d={d}", phase=r["phase"], seed=int(r["seed"]),
                            eta=float(r["eta"]), nauc=float(r["nauc"]), failed=bool(r["failed"])))
    return out


def _child(env_extra: dict) -> list[dict]:
    env = {**os.environ, **env_extra}
    code = "import json, figures.verify as v; print(json.dumps(v.numba_cells()))"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def compare_numba() -> dict:
    """Host target vs ``NUMBA_CPU_NAME=generic``: runs compared, equal, largest |Δ nAUC|, failure flags that differ."""
    host, generic = _child({}), _child({"NUMBA_CPU_NAME": "generic"})
    key = lambda r: (r["cell"], r["phase"], r["seed"], r["eta"])  # noqa: E731
    g = {key(r): r for r in generic}
    if set(g) != {key(r) for r in host}:
        raise RuntimeError("the generic and host runs cover different (cell, phase, seed, η)")
    gaps = [abs(r["nauc"] - g[key(r)]["nauc"]) for r in host]
    flips = [key(r) for r in host if r["failed"] != g[key(r)]["failed"]]
    return dict(runs=len(host), equal=sum(x == 0.0 for x in gaps), max_abs_nauc=max(gaps, default=0.0),
                failure_flips=[list(k) for k in flips], cells=[f"{f}/{e}/d={d}" for f, e, d in NUMBA_CELLS])


def verify_lm(results_root: str = "results") -> dict:
    """The LM kernel-path check of the report's protocol on its sweep (run or re-used)."""
    from figures import fig_llm_delay
    from simulate.llm import experiment as ex
    from simulate.llm.portability import perturbation
    from simulate.llm.protocol import PROTOCOL

    df = ex.run(fig_llm_delay.sweep(False, results_root, PROTOCOL))
    pert = perturbation.perturb(ex.arm(df, 1.0), PROTOCOL, os.path.join(results_root, "llm", f"perturb-v{PROTOCOL.version}"))
    print(perturbation.table(pert))
    ident = {p: dict(equal=int(i["equal"]), runs=int(i["runs"]), max_abs_auc=float(i["max_abs_auc"]))
             for p, i in (pert.get("identity") or {}).items()}
    return dict(protocol=f"{PROTOCOL.name} v{PROTOCOL.version} ({PROTOCOL.content_hash()})", seeds=list(pert["seeds"]),
                paths=[p["requested"] for p in pert["paths"] if p["ran"]], parts=len(pert["parts"]),
                fragile=list(pert["fragile"]), identity=ident)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results", help="the results root of `make run` (LM sweep re-used)")
    ap.add_argument("--skip-lm", action="store_true", help="only the Numba comparison (seconds, not minutes)")
    args = ap.parse_args(argv)
    from sweep import git_commit

    # stage lines: the LM part re-runs the LM sweep when the code changed since `make run` (minutes, its own bar)
    if not args.skip_lm:
        print("[verify] LM: the protocol's sweep (re-used when cached), then its perturb_seeds on each other kernel "
              "path", flush=True)
    lm = {} if args.skip_lm else verify_lm(args.results)
    print(f"[verify] Numba: {len(NUMBA_CELLS)} protocol v6 cells on the host target and under NUMBA_CPU_NAME=generic "
          "(two child processes)", flush=True)
    nb = compare_numba()
    ok = not (lm.get("fragile") or nb["failure_flips"])
    st = dict(date=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"), commit=git_commit(), ok=ok, lm=lm, numba=nb)
    STAMP.parent.mkdir(parents=True, exist_ok=True)
    STAMP.write_text(json.dumps(st, indent=1, sort_keys=True) + "\n")
    print(stamp_line(st))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["NUMBA_CELLS", "numba_cells", "compare_numba", "verify_lm", "main", "STAMP", "load_stamp", "stamp_line"]
