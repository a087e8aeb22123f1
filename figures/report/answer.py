"""The report's first screen: the one answer table (gmc minus each rival, per setting, at d = 8 and d = 32),
three computed recommendation lines, and the reconstruction caveat.

Entries come from the figures' optional ``"answer"`` sidecar key (report interface: one dict per
comparison ``gmc − rival`` with ``group``, ``setting``, ``d``, ``rival``, ``arm``, ``metric``, ``delta``,
``lo``, ``hi``, ``interval``, ``n``). A group that no sidecar reports is derived from today's structures:
the tabular row from the protocol's C9 comparisons (d = 8, η tuned per estimator) and the regime map
(gmc − onpolicy at d = 8 and 32, η tuned), the CPU LM row from the LM figure's per-seed runs (paired
95 % t over seeds at the base step size).
"""
from __future__ import annotations

import re

import numpy as np

from figures.report.data import DASH, LM_FIGURE, finite, signed
from simulate import verdicts as vd

#: Row order and labels of the answer table (interface groups).
GROUPS = {
    "tabular": "tabular softmax instances (toy MDPs)",
    "user-mdp": "your own MDP (`python -m simulate protocol --instance-file`)",
    "toy-lm-faithful": "LM-faithful toy (lm-faithful-exact, protocol cells)",
    "toy-ladder": "LM-faithful toy on the ladder (rung 6, exploratory)",
    "cpu-lm": "tiny LM on CPU (2-digit sums)",
    "gpu-lm": "LM on a GPU",
}
#: Columns: the rival (or rival class) of gmc.
COLUMNS = ("onpolicy", "is", "tis/tic", "grpo", "best peer")
COLUMN_TITLES = {"onpolicy": "gmc − onpolicy", "is": "gmc − is", "tis/tic": "gmc − tis/tic (stronger)",
                 "grpo": "gmc − grpo (token clip)", "best peer": "gmc − best peer correction"}
DELAYS = (8, 32)
_KEYS = ("group", "setting", "d", "rival", "delta", "lo", "hi")


def peer_corrections() -> tuple[str, ...]:
    """The registered peer staleness corrections (``asyncgrpo.estimators.PEER_ESTIMATORS``: verl, TRL)."""
    from asyncgrpo.estimators import PEER_ESTIMATORS

    return tuple(PEER_ESTIMATORS)


def check_entry(e: dict, where: str = "answer") -> dict:
    """Validate one ``answer`` entry; a bad one raises ``ValueError`` naming the field and the valid range."""
    for k in _KEYS:
        if k not in e:
            raise ValueError(f"{where}: entry lacks {k!r} (needs {', '.join(_KEYS)}): {e!r}")
    if e["group"] not in GROUPS:
        raise ValueError(f"{where}: group must be one of {', '.join(GROUPS)}, got {e['group']!r}")
    if isinstance(e["d"], bool) or not isinstance(e["d"], int) or e["d"] < 0:
        raise ValueError(f"{where}: d must be an integer >= 0, got {e['d']!r}")
    for k in ("delta", "lo", "hi"):
        if not finite(e[k]):
            raise ValueError(f"{where}: {k} must be a finite number, got {e[k]!r}")
    if not e["lo"] <= e["delta"] <= e["hi"]:
        raise ValueError(f"{where}: need lo <= delta <= hi, got {e['lo']}, {e['delta']}, {e['hi']}")
    return e


def entries(rep: dict) -> list[dict]:
    """Every answer entry: the sidecars' ``answer`` keys, plus the rows derived from today's C9 / regime-map / LM
    structures for the (group, setting, d, rival, arm) no sidecar reports (CPU LM: only when no LM row is given)."""
    given = [check_entry(dict(e), m["figure"]) for m in rep["sidecars"] for e in (m.get("answer") or [])]

    def key(e):
        return e["group"], e["setting"], e["d"], e["rival"], e.get("arm", "")

    have = {key(e) for e in given}
    lm_given = any(e["group"] == "cpu-lm" for e in given)  # the LM figure's own rows replace the derived ones
    derived = derive_tabular(rep) + ([] if lm_given else derive_lm(rep))
    return given + [e for e in derived if key(e) not in have]


def derive_tabular(rep: dict) -> list[dict]:
    """gmc − rival on the tabular instances: C9's comparisons at its primary d (η tuned per estimator, paired t
    at each comparison's Holm level) and the regime map's gmc − onpolicy at d ∈ DELAYS (η tuned, 95 % paired t)."""
    out = []
    pm = rep.get("protocol") or {}
    c9 = rep.get("c9") or {}
    d9 = (pm.get("primary") or {}).get("d")
    rm = rep.get("regime_map") or {}
    st = rm.get("settings") or {}
    G0, e0 = st.get("primary_G"), st.get("primary_eps")
    groups = pm.get("instance_groups") or {}  # v5: an instance's own answer row (e.g. the LM-faithful toy)
    have_rm = set()
    for c in rm.get("comparisons") or []:
        if (c.get("comparison") == "gmc − onpolicy" and c.get("arm") == "tuned" and int(c["d"]) in DELAYS
                and (G0 is None or int(c["G"]) == int(G0)) and (e0 is None or abs(float(c["eps"]) - float(e0)) < 1e-12)
                and finite(c.get("estimate")) and finite(c.get("lo")) and finite(c.get("hi"))):
            out.append(dict(group=groups.get(c["instance"], "tabular"), setting=c["instance"], d=int(c["d"]),
                            rival="onpolicy", arm="tuned η",
                            metric="nAUC", delta=c["estimate"], lo=c["lo"], hi=c["hi"], n=c.get("n"),
                            interval="gmc − onpolicy: " + (rm.get("interval") or "95 % paired t over the held-out seeds")))
            have_rm.add((c["instance"], int(c["d"])))
    pat = re.compile(r"^gmc − (\S+) \(d=(\d+), tuned η\)$")
    for c in c9.get("comparisons") or []:
        m = pat.match(c.get("name", ""))
        if not m or not (finite(c.get("estimate")) and finite(c.get("lo")) and finite(c.get("hi"))):
            continue
        rival, d = m.group(1), int(m.group(2))
        if d != d9 or (rival == "onpolicy" and (c["instance"], d) in have_rm):
            continue
        out.append(dict(group=groups.get(c["instance"], "tabular"), setting=c["instance"], d=d, rival=rival, arm="tuned η", metric="nAUC",
                        delta=c["estimate"], lo=c["lo"], hi=c["hi"], n=c.get("n"),
                        interval="other rivals (d = 8): paired t at the comparison's Holm level (protocol C9), "
                                 "held-out seeds"))
    return out


def derive_lm(rep: dict) -> list[dict]:
    """gmc − rival on the tiny LM at d ∈ DELAYS from the per-seed runs of the base step size: paired over seeds,
    mean and 95 % t-interval (:func:`simulate.verdicts.t_interval`)."""
    meta = rep.get("lm_meta") or {}
    runs = [r for r in meta.get("runs") or [] if float(r.get("lr_factor", 1.0)) == 1.0 and finite(r.get("auc"))]
    by = {(r["estimator"], int(r["d"]), r["seed"]): float(r["auc"]) for r in runs}
    out = []
    for d in DELAYS:
        for rival in dict.fromkeys(r["estimator"] for r in runs):
            if rival == "gmc":
                continue
            seeds = sorted(s for (e, dd, s) in by if e == "gmc" and dd == d and (rival, d, s) in by)
            if len(seeds) < 2:
                continue
            diff = np.array([by[("gmc", d, s)] - by[(rival, d, s)] for s in seeds])
            m, lo, hi = vd.t_interval(diff, 0.95)
            out.append(dict(group="cpu-lm", setting="tiny LM, 2-digit sums", d=d, rival=rival, arm="", metric=
                            "accuracy AUC", delta=m, lo=lo, hi=hi, n=len(seeds),
                            interval=f"95 % paired t over {len(seeds)} seeds"))
    return out


def _column(rival: str, peers) -> str | None:
    if rival in ("tis", "tic"):
        return "tis/tic"
    if rival in ("onpolicy", "is", "grpo"):
        return rival
    return "best peer" if rival in peers else None


def cells(ents: list[dict], peers=None) -> dict:
    """``{(group, column, d): [entry per setting]}``: for "tis/tic" and "best peer" the strongest rival of each
    setting (the smallest gmc − rival, i.e. the rival with the largest mean), named in the entry."""
    peers = peer_corrections() if peers is None else peers
    best: dict = {}
    for e in ents:
        col = _column(e["rival"], peers)
        if col is None:
            continue
        key = (e["group"], col, e["d"], e["setting"], e.get("arm", ""))
        if key not in best or e["delta"] < best[key]["delta"]:
            best[key] = e
    out: dict = {}
    for (g, col, d, _s, _a), e in best.items():
        out.setdefault((g, col, d), []).append(e)
    return out


def cell_text(es: list[dict] | None, col: str) -> str:
    """One setting: ``+0.252 [+0.223, +0.281]`` (rival named for a class column); several (an instance range):
    ``−0.13 … −0.04 (↑0 ↓6 of 7)`` — ↑/↓: interval entirely above/below 0."""
    if not es:
        return DASH
    if len(es) == 1:
        e = es[0]
        name = f" ({e['rival']})" if col in ("tis/tic", "best peer") else ""
        return f"{signed(e['delta'])} [{signed(e['lo'])}, {signed(e['hi'])}]{name}"
    ds = [e["delta"] for e in es]
    up = sum(e["lo"] > 0 for e in es)
    down = sum(e["hi"] < 0 for e in es)
    return f"{signed(min(ds), 2)} … {signed(max(ds), 2)} (↑{up} ↓{down} of {len(es)})"


def one_arm(ents: list[dict], peers=None) -> list[dict]:
    """Per cell (group, column, d), the entries of one step-size arm: ``tuned η`` where the cell has it, else its
    first arm — so an instance range never mixes arms, and a cell measured only on the common arm still shows."""
    peers = peer_corrections() if peers is None else peers
    arms: dict = {}
    for e in ents:
        arms.setdefault((e["group"], _column(e["rival"], peers), e["d"]), []).append(e.get("arm", ""))
    pick = {k: ("tuned η" if "tuned η" in v else v[0]) for k, v in arms.items()}
    return [e for e in ents if e.get("arm", "") == pick[(e["group"], _column(e["rival"], peers), e["d"])]]


def _main_arm(ents: list[dict], g: str) -> str:
    arms = list(dict.fromkeys(e.get("arm", "") for e in ents if e["group"] == g))
    return "tuned η" if "tuned η" in arms else (arms[0] if arms else "")


def table(rep: dict, ents: list[dict] | None = None) -> tuple[list[str], list[list[str]], str]:
    """``(header, rows, note)`` of the one answer table (one step-size arm per group, named in the row)."""
    ents = one_arm(entries(rep) if ents is None else ents)
    cs = cells(ents)
    header = ["setting", *[f"{COLUMN_TITLES[c]}, d = {d}" for c in COLUMNS for d in DELAYS]]
    rows = []
    present = {e["group"] for e in ents}
    for g, label in GROUPS.items():
        if g not in present and g not in ("gpu-lm",):
            continue  # optional rows (your MDP, LM-faithful toy) appear when a figure reports them
        if g not in present:
            rows.append([label, *["not run"] * (len(header) - 1)])
            continue
        metric = next((e.get("metric") for e in ents if e["group"] == g and e.get("metric")), "")
        arm = _main_arm(ents, g)
        row = [f"{label}" + (f" [{', '.join(x for x in (metric, arm) if x)}]" if metric or arm else "")]
        for c in COLUMNS:
            for d in DELAYS:
                es = cs.get((g, c, d))
                other = {e.get("arm", "") for e in es or []} - {arm}
                row.append(cell_text(es, c) + (f" [{', '.join(sorted(other))}]" if other else ""))
        rows.append(row)
    intervals = sorted({f"{GROUPS[e['group']].split(' (')[0]}: {e['interval']}" for e in ents if e.get("interval")})
    peers = ", ".join(peer_corrections())
    note = ("Positive: gmc better. One setting: mean [interval]; several (tabular instances): range of the means over "
            "instances, ↑k / ↓k = instances whose interval lies entirely above / below 0; a cell measured only on "
            "another step-size arm than its row's names it in brackets. Intervals: "
            + "; ".join(dict.fromkeys(intervals)) + f". tis/tic and best peer ({peers}): the rival with the largest mean, "
            "named. —: not measured at that d; not run: no results yet.")
    return header, rows, note


def _stance(es: list[dict], margin: float) -> dict:
    """Per rival (over the group's entries at its largest d): ahead / tied within ±margin / behind."""
    if not es:
        return {}
    dmax = max(e["d"] for e in es)
    out = {"d": dmax, "ahead": [], "tied": [], "behind": [], "open": []}
    for e in sorted((e for e in es if e["d"] == dmax), key=lambda e: -e["delta"]):
        k = "ahead" if e["lo"] > 0 else "behind" if e["hi"] < 0 else "tied" if (
            e["lo"] > -margin and e["hi"] < margin) else "open"
        out[k].append(e)
    return out


def recommendation(rep: dict, ents: list[dict] | None = None) -> list[str]:
    """Three computed lines: what to do on tabular-like problems, on the LM, and what the numbers do not say."""
    ents = one_arm(entries(rep) if ents is None else ents)
    margin = float((rep.get("protocol") or {}).get("margin") or 0.02)
    lines = []
    tab = [e for e in ents if e["group"] == "tabular" and e["rival"] == "onpolicy"]
    if tab:
        up = sum(e["lo"] > 0 for e in tab)
        down = sum(e["hi"] < 0 for e in tab)
        ds = sorted({e["d"] for e in tab})
        n_inst = len({e["setting"] for e in tab})
        if down and not up:
            verb = ("**no correction (onpolicy) is at least as good as gmc**: gmc is significantly behind on "
                    f"{down} and ahead on none")
        elif up and not down:
            verb = f"**gmc beats no correction**: significantly ahead on {up}, behind on none"
        else:
            verb = f"**no single winner**: gmc significantly ahead on {up}, behind on {down}"
        lines.append(f"Tabular softmax instances ({n_inst} toy MDPs, nAUC, η tuned per estimator): {verb} of the "
                     f"{len(tab)} instance × delay cells (d ∈ {ds}).")
    for g in ("toy-lm-faithful", "toy-ladder", "user-mdp", "cpu-lm", "gpu-lm"):
        es = [e for e in ents if e["group"] == g]
        if not es:
            continue
        s = _stance([e for e in es if _column(e["rival"], peer_corrections()) is not None], margin)
        fmt = ", ".join
        parts = []
        if s["ahead"]:
            parts.append("gmc beats " + fmt(f"{e['rival']} by {signed(e['delta'])} [{signed(e['lo'])}, "
                                            f"{signed(e['hi'])}]" for e in s["ahead"]))
        if s["tied"]:
            parts.append("ties (interval within ±" + f"{margin:g}) with " + fmt(e["rival"] for e in s["tied"]))
        if s["behind"]:
            parts.append("trails " + fmt(f"{e['rival']} by {signed(-e['delta'])} [{signed(-e['hi'])}, "
                                         f"{signed(-e['lo'])}]" for e in s["behind"]))
        if s["open"]:
            parts.append("undecided against " + fmt(e["rival"] for e in s["open"]))
        best = s["behind"][0]["rival"] if s["behind"] else "gmc" if not s["open"] else None
        advice = (f" → use **{best}** here" if best else " → gmc or the undecided rivals")
        label = GROUPS[g].split(" (")[0]
        ctx = ""
        if g == "cpu-lm":
            fails = lm_failures(rep, s["d"])
            reg = (rep.get("lm_meta") or {}).get("regime")
            ctx = (f" (failed runs at d = {s['d']}: {fails}" if fails else "") + (f"; {reg}" if reg else "") + (
                ")" if fails else "")
        lines.append(f"{label[0].upper() + label[1:]} at d = {s['d']}: " + "; ".join(parts) + ctx + advice + ".")
    rm = regime_line(rep)
    if rm:
        lines.append(rm)
    return lines


def regime_line(rep: dict) -> str:
    """Where on the regime map (every instance, d, η factor, G, ε) gmc is significantly ahead of / behind onpolicy."""
    rm = rep.get("regime_map") or {}
    cs = [c for c in rm.get("comparisons") or [] if c.get("comparison") == "gmc − onpolicy" and int(c.get("d", 0)) > 0
          and finite(c.get("lo")) and finite(c.get("hi"))]
    if not cs:
        return ""
    up = [c for c in cs if c["lo"] > 0]
    down = sum(c["hi"] < 0 for c in cs)
    st = rm.get("settings") or {}
    where = ("; ahead at " + ", ".join(f"{c['instance']} d = {c['d']} (η×{c['eta_factor']:g}, G = {c['G']}, "
                                       f"ε = {c['eps']:g})" for c in up[:4]) + (" …" if len(up) > 4 else "")) if up else ""
    return (f"Where gmc could help (regime map, {len(cs)} cells with d ≥ 1: {len(st.get('instances') or [])} "
            f"instances, d ≤ {max(st.get('delays') or [0])}, η × {st.get('eta_factors')}, G ∈ {st.get('G')}, "
            f"ε ∈ {st.get('eps')}; {rm.get('interval') or '95 % paired t'}, no multiplicity correction): gmc is "
            f"significantly ahead of onpolicy in {len(up)} and behind in {down}{where}.")


CAVEAT = ("**Caveat.** The claims C1–C9 are this project's reconstruction of the paper's abstract (docs/THEORY.md), "
          "not the paper's own statements. `refuted` refutes our reconstruction's empirical implication at the "
          "measured points, not the paper; `holds` likewise confirms only the reconstruction.")


def lm_failures(rep: dict, d: int) -> str:
    """``onpolicy 12/12, gmc 0/12`` failed runs at delay ``d`` and the base step size, from the LM runs."""
    runs = [r for r in (rep.get("lm_meta") or {}).get("runs") or [] if float(r.get("lr_factor", 1.0)) == 1.0
            and int(r["d"]) == d]
    ests = list(dict.fromkeys(r["estimator"] for r in runs))
    return ", ".join(f"{e} {sum(r['failure'] != 'none' for r in runs if r['estimator'] == e)}/"
                     f"{sum(r['estimator'] == e for r in runs)}" for e in ests)


def broken_arms(meta: dict | None) -> dict[float, str]:
    """LM step-size arms where every run fails, the d = 0 control included: ``{lr_factor: why}`` (out of scope)."""
    out = {}
    runs = (meta or {}).get("runs") or []
    for fac in dict.fromkeys(float(r.get("lr_factor", 1.0)) for r in runs):
        rs = [r for r in runs if float(r.get("lr_factor", 1.0)) == fac]
        ctrl = [r for r in rs if int(r["d"]) == 0]
        if rs and ctrl and all(r.get("failure", "none") != "none" for r in rs):
            out[fac] = (f"every run fails ({len(rs)}/{len(rs)}), the d = 0 control included "
                        f"({len(ctrl)}/{len(ctrl)})")
    return out


__all__ = ["GROUPS", "COLUMNS", "DELAYS", "entries", "derive_tabular", "derive_lm", "cells", "cell_text", "table",
           "recommendation", "CAVEAT", "check_entry", "lm_failures", "broken_arms", "LM_FIGURE"]
