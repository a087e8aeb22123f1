"""The report's appendix of exploratory results (issue 53): gmc − rival class on every group that is not confirmatory
(protocol v5's instances, the ladder, your MDP), the regime-map line with its Benjamini–Hochberg count, protocol v6's
other step-size arm and the earlier LM protocol versions. Nothing here feeds the headline
(:func:`figures.report.answer.recommendation`)."""
from __future__ import annotations


from figures.report.answer import DELAYS, GROUPS, _arm_word, _cell, entries, is_confirmatory, v6_meta
from figures.report.data import DASH, finite, signed

#: Columns: the rival (or rival class) of gmc.
COLUMNS = ("onpolicy", "is", "tis/tic", "grpo", "best peer")
COLUMN_TITLES = {"onpolicy": "gmc − onpolicy", "is": "gmc − is", "tis/tic": "gmc − tis/tic (stronger)",
                 "grpo": "gmc − grpo (token clip)", "best peer": "gmc − best peer correction"}


def peer_corrections() -> tuple[str, ...]:
    """The registered peer staleness corrections (``asyncgrpo.estimators.PEER_ESTIMATORS``: verl, TRL)."""
    from asyncgrpo.estimators import PEER_ESTIMATORS

    return tuple(PEER_ESTIMATORS)


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


def exploratory_table(rep: dict, ents: list[dict] | None = None) -> tuple[list[str], list[list[str]], str]:
    """``(header, rows, note)`` of the exploratory table (appendix only; one step-size arm per group, named in the
    row): gmc − rival class on the groups that are not confirmatory (v5 instances, the ladder, LM v7, your MDP)."""
    ents = one_arm([e for e in (entries(rep) if ents is None else ents) if not is_confirmatory(e)])
    cs = cells(ents)
    header = ["setting", *[f"{COLUMN_TITLES[c]}, d = {d}" for c in COLUMNS for d in DELAYS]]
    rows = []
    present = {e["group"] for e in ents}
    for g, label in GROUPS.items():
        if g not in present:
            continue  # exploratory rows appear when a figure reports them
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
    note = ("Exploratory: these rows come from protocol versions, instances and seeds chosen or seen before protocol "
            "v6 (v5's instances, the ladder, the LM protocol v7); they never feed the headline. Positive: gmc better. "
            "One setting: mean [interval]; several (tabular instances): range of the means over instances, ↑k / ↓k = "
            "instances whose interval lies entirely above / below 0; a cell measured only on another step-size arm than "
            "its row's names it in brackets. Intervals: " + "; ".join(dict.fromkeys(intervals))
            + f". tis/tic and best peer ({peers}): the rival with the largest mean, named. —: not measured at that d.")
    return header, rows, note


def exploratory_blocks(rep: dict) -> list:
    """Appendix blocks: the exploratory table, the regime-map line and v6's other arm (never feed the headline)."""
    header, rows, note = exploratory_table(rep)
    b = [("h2", "Exploratory results (never feed the headline)")]
    if rows:
        b += [("table", header, rows), ("p", note)]
    rl = regime_line(rep)
    if rl:
        b.append(("p", rl))
    meta = v6_meta(rep)
    # an entry without an arm is read as the primary arm's, as the first table reads it (confirmatory)
    other = [e for e in entries(rep) if e["group"] in ("tabular-family", "lm-like-family")
             and e.get("arm", "") not in (_arm_word(meta), "")]
    if other:
        b += [("p", "Protocol v6 on its other step-size arm (η tuned at d = 0 by onpolicy, shared by every estimator):"),
              ("table", ["setting", "d", "rival", "arm", "gmc − rival (IQM) [interval]; P [interval]"],
               [[GROUPS[e["group"]], str(e["d"]), e["rival"], e["arm"], _cell(e)] for e in other])]
    return b + lm_history_blocks()


def lm_history_blocks() -> list:
    """The earlier LM protocol versions' key comparisons (:mod:`figures.report.lm_history`), or why they are absent."""
    from figures.report import lm_history

    try:
        header, rows, note = lm_history.table(lm_history.load())
    except ValueError as err:
        return [("p", f"Earlier LM protocol versions: not shown ({err}).")]
    return [("p", "Earlier LM protocol versions (exploratory):"), ("table", header, rows), ("p", note)]


def regime_line(rep: dict) -> str:
    """Where on the regime map (every instance, d, η factor, G, ε) gmc is ahead of / behind onpolicy after the
    Benjamini–Hochberg correction within the map (``scipy.stats.false_discovery_control``, q = 0.05); the p-value of
    each cell from its paired-t interval (two-sided, n − 1 degrees of freedom)."""
    from scipy import stats

    rm = rep.get("regime_map") or {}
    # a cell whose interval does not hold its estimate (lo ≤ estimate ≤ hi) is malformed: no p-value can come from it
    cs = [c for c in rm.get("comparisons") or [] if c.get("comparison") == "gmc − onpolicy" and int(c.get("d", 0)) > 0
          and finite(c.get("lo")) and finite(c.get("hi")) and finite(c.get("estimate")) and int(c.get("n") or 0) >= 2
          and float(c["lo"]) <= float(c["estimate"]) <= float(c["hi"])]
    if not cs:
        return ""
    ps = []
    for c in cs:
        n = int(c["n"])
        half = (float(c["hi"]) - float(c["lo"])) / 2
        se = half / stats.t.ppf(0.975, n - 1)
        ps.append(1.0 if se <= 0 and c["estimate"] == 0 else 0.0 if se <= 0 else
                  float(2 * stats.t.sf(abs(float(c["estimate"])) / se, n - 1)))
    adj = stats.false_discovery_control(ps, method="bh")
    sig = [c for c, q in zip(cs, adj) if q <= 0.05]
    up = [c for c in sig if c["estimate"] > 0]
    down = sum(c["estimate"] < 0 for c in sig)
    raw_up = sum(c["lo"] > 0 for c in cs)
    st = rm.get("settings") or {}
    fams = {}
    for c in cs:
        f = fams.setdefault(c["instance"], [0, 0, 0])
        f[0] += 1
    for c in sig:
        fams[c["instance"]][1 if c["estimate"] > 0 else 2] += 1
    per = "; ".join(f"{i}: ↑{a} ↓{b} of {n}" for i, (n, a, b) in fams.items())
    where = ("; surviving ahead: " + ", ".join(f"{c['instance']} d = {c['d']} (η×{c['eta_factor']:g}, G = {c['G']}, "
                                                f"ε = {c['eps']:g})" for c in up[:4]) + (" …" if len(up) > 4 else "")) if up else ""
    return (f"Regime map (exploratory; {len(cs)} cells with d ≥ 1: {len(st.get('instances') or [])} v5 instances, d ≤ "
            f"{max(st.get('delays') or [0])}, η × {st.get('eta_factors')}, G ∈ {st.get('G')}, ε ∈ {st.get('eps')}; "
            f"{rm.get('interval') or '95 % paired t'}, then Benjamini–Hochberg at q = 0.05 within the map): gmc ahead of "
            f"onpolicy in {len(up)} cells and behind in {down} (before the correction: ahead in {raw_up}). Per instance: "
            f"{per}{where}.")


__all__ = ["COLUMNS", "COLUMN_TITLES", "peer_corrections", "cells", "cell_text", "one_arm", "exploratory_table",
           "exploratory_blocks", "lm_history_blocks", "regime_line"]
