"""Earlier LM protocol versions (v2–v7), exploratory: their key comparisons, kept for the report's appendix (issue 53).

Each version's report sidecar (``figures/out/fig_llm_delay.json``) is read from the commit that carried it
(:data:`VERSIONS`); from its per-seed runs on the base step size, ``gmc − X`` in accuracy AUC at each ``d ∈``
:data:`DELAYS` with its 95 % paired t-interval over the version's seeds (:func:`simulate.verdicts.t_interval`, the
same rule for every version), and the Holm verdict the version registered at its ``d_max``. The extract is stored in
:data:`PATH` with a SHA-256 seal of its content and the SHA-256 of every source sidecar's bytes, because a clone may
lack the history: ``python -m figures.report.lm_history`` re-makes it from git, ``--check`` compares. These rows never
feed the headline (LM protocol v8 re-ran the question on fresh seeds).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
from pathlib import Path

import numpy as np

from simulate import verdicts as vd

#: (LM protocol version, commit whose figures/out/fig_llm_delay.json is that version's report sidecar).
VERSIONS: tuple[tuple[int, str], ...] = ((2, "33b6c64"), (3, "6ea58be"), (4, "ca54025"), (5, "ff80b7d"),
                                         (6, "43ab277"), (7, "093a3de"))
RIVALS: tuple[str, ...] = ("onpolicy", "is", "tis", "tic", "grpo")
DELAYS: tuple[int, ...] = (8, 32)
SIDECAR = "figures/out/fig_llm_delay.json"
ROOT = Path(__file__).resolve().parents[2]
PATH = ROOT / "figures" / "history" / "lm_versions.json"


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def extract(version: int, raw: bytes, commit: str) -> dict:
    """One version's record from its sidecar's bytes: protocol hash, seeds, verdict and ``gmc − X`` rows."""
    meta = json.loads(raw)
    got = (meta.get("lm_protocol") or {}).get("version")
    if got != version:
        raise ValueError(f"{commit}:{SIDECAR} holds LM protocol version {got!r}, expected {version}")
    runs = [r for r in meta.get("runs") or [] if float(r.get("lr_factor", 1.0)) == 1.0]
    auc = {(r["estimator"], int(r["d"]), r["seed"]): float(r["auc"]) for r in runs}
    holm = {c["name"]: c.get("verdict") for c in meta.get("comparisons") or []}
    rows = []
    for d in DELAYS:
        for x in RIVALS:
            seeds = sorted(s for (e, dd, s) in auc if e == "gmc" and dd == d and (x, d, s) in auc)
            if len(seeds) < 2:
                continue
            m, lo, hi = vd.t_interval(np.array([auc[("gmc", d, s)] - auc[(x, d, s)] for s in seeds]), 0.95)
            rows.append(dict(d=d, rival=x, delta=m, lo=lo, hi=hi, n=len(seeds),
                             holm=holm.get(f"gmc not worse than {x} at d={d}")))
    return dict(version=version, commit=commit, protocol_hash=meta.get("protocol_hash"),
                sidecar_sha256=hashlib.sha256(raw).hexdigest(), n_seeds=len({r["seed"] for r in runs}),
                verdict=meta.get("verdict"), rows=rows)


def from_git(root: Path = ROOT) -> dict:
    """The record of every version in :data:`VERSIONS`, read with ``git show`` (needs the commits), sealed."""
    out = []
    for v, c in VERSIONS:
        raw = subprocess.run(["git", "show", f"{c}:{SIDECAR}"], cwd=root, capture_output=True, check=True).stdout
        out.append(extract(v, raw, c))
    body = {"interval": "95 % paired t over the version's seeds (base step size), accuracy AUC", "versions": out}
    return {**body, "seal": hashlib.sha256(_canonical(body)).hexdigest()}


def load(path: Path = PATH) -> dict:
    """The stored extract; a missing file, unreadable JSON or a seal that does not match its content is refused."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"LM history {path}: unreadable ({err})") from err
    seal = data.pop("seal", None)
    if seal != hashlib.sha256(_canonical(data)).hexdigest():
        raise ValueError(f"LM history {path}: seal does not match its content (damaged or edited)")
    return data


def table(data: dict) -> tuple[list[str], list[list[str]], str]:
    """``(header, rows, note)``: one row per version, ``gmc − X`` at ``d = 32`` with its interval, and the verdict."""
    def cell(r):
        txt = f"{r['delta']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
        return txt + (f" ({r['holm']})" if r.get("holm") else "")

    header = ["LM protocol", *[f"gmc − {x}, d = 32" for x in RIVALS], "C9 at LM scale"]
    rows = []
    for v in data["versions"]:
        by = {r["rival"]: r for r in v["rows"] if r["d"] == 32}
        rows.append([f"v{v['version']} ({v['protocol_hash']}, {v['n_seeds']} seeds, report {v['commit']})",
                     *[cell(by[x]) if x in by else "not measured" for x in RIVALS], str(v["verdict"])])
    note = ("Exploratory: the LM protocol's earlier versions, each decided on seeds an earlier version had used (v2–v7: "
            "seeds 0–15); LM protocol v8 asks the question again on fresh seeds and alone feeds the headline. Cells: "
            f"mean accuracy-AUC difference, positive = gmc better, with its {data['interval']}; in brackets the Holm "
            f"verdict the version registered. Source: each version's report sidecar, read from git ({PATH.name}, "
            "sealed; `python -m figures.report.lm_history --check`).")
    return header, rows, note


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare the stored extract with one re-made from git")
    args = ap.parse_args(argv)
    fresh = from_git()
    if args.check:
        same = load() == {k: v for k, v in fresh.items() if k != "seal"}
        print("LM history: " + ("matches git" if same else "DIFFERS from git"))
        return 0 if same else 1
    PATH.parent.mkdir(parents=True, exist_ok=True)
    PATH.write_text(json.dumps(fresh, indent=1, sort_keys=True) + "\n")
    print(f"wrote {PATH}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
