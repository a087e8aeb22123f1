"""The claim rows: one verdict word (simulate.verdicts), a note column for qualifiers, and a key number that
says what it shows, for C1–C9 (C4 split into its bound and its rate).

Rules used here, each once: a bound's looseness is :func:`simulate.verdicts.looseness` (bound over the
measurement's upper 3-s.e. limit), reported as the tightest and the median over the claim's rows; an
exact identity holds within 3 s.e. (note "exact identity"); "constant in G" is a two-sided equivalence
test (:func:`simulate.verdicts.equivalence`, TOST) within ±``EQUIV_REL`` of the value at the largest G.
"""
from __future__ import annotations

import math
import re
import statistics

from figures.report.data import DASH, INFO, VERDICT_FIGURE, f, finite, signed
from figures.stats import fmt
from simulate import verdicts as vd

#: "constant in G": equivalence margin, a fraction of the quantity's value at the largest G (issue 34). It was first
#: chosen after seeing fig1's seed-0 data; on 2026-12-07 (issue 54) it was fixed at ±10 % *before* fig1 was re-measured
#: on a fresh seed (``figures.fig_bias_G.SEED``, committed with this line before the run), and the row says both.
EQUIV_REL = 0.10
#: Where and when the margin was fixed (printed in the C7 row).
EQUIV_REL_HISTORY = ("margin ±10 % first chosen after seeing seed 0; fixed before the fresh seed "
                     "(2026-12-07) that these numbers come from")
#: The bound's ε-exponent of each map's fourth-order delay term (theory.claims C4).
C4_BOUND_EXPONENT = {"gmc": -2, "tis": -2, "tic": -4}
#: Row labels of the verdict table, in order (C4 has two rows).
ROWS = ("C1", "C2", "C3", "C4", "C4-rate", "C5", "C5-T", "C6", "C7", "C8", "C9")


def rows_verdict(verdicts) -> str:
    """One verdict from evidence rows: refuted if any row is; out of scope if all are; holds if every scoped row
    holds (loose or not); otherwise inconclusive. ``reported`` rows are not verdicts."""
    vs = [v for v in verdicts if v and v != INFO]
    if not vs:
        return vd.INCONCLUSIVE
    for v in vs:
        if not vd.is_verdict(v):
            raise ValueError(f"evidence verdict {v!r} is outside the vocabulary {vd.VERDICTS}")
    if vd.REFUTED in vs:
        return vd.REFUTED
    scoped = [v for v in vs if v != vd.OUT_OF_SCOPE]
    if not scoped:
        return vd.OUT_OF_SCOPE
    return vd.HOLDS if all(v.startswith(vd.HOLDS) for v in scoped) else vd.INCONCLUSIVE


def judged(rep: dict, cid: str) -> list[dict]:
    """The rows that judge claim ``cid`` (``reported`` rows and other figures' context rows left out)."""
    evs = [ev for ev in rep["evidence"].get(cid, []) if ev.get("verdict") != INFO]
    if cid in VERDICT_FIGURE:
        evs = [ev for ev in evs if ev.get("figure") == VERDICT_FIGURE[cid]]
    return evs


def _k(ev: dict) -> float | None:
    return vd.looseness(ev.get("measured"), ev.get("se"), ev.get("bound"))


def looseness_summary(evs: list[dict]) -> tuple[float | None, float | None, dict | None]:
    """``(tightest k, median k, tightest row)`` over the rows with a positive bound (one looseness function)."""
    ks = [(k, ev) for ev in evs if (k := _k(ev)) is not None]
    if not ks:
        return None, None, None
    k0, ev0 = min(ks, key=lambda t: t[0])
    return k0, statistics.median(k for k, _ in ks), ev0


def bound_verdict(rep: dict, cid: str) -> tuple[str, str]:
    """``(verdict, key)`` of a bound claim from its rows: refuted if any row is; otherwise ``holds`` with the
    looseness of the tightest row (``holds, bound loose ×k`` when k > 2) and the median beside it."""
    evs = [ev for ev in judged(rep, cid) if finite(ev.get("measured"))]
    if not evs:
        return (vd.HOLDS if rep["theory"][cid].get("ok") else vd.INCONCLUSIVE), "symbolic only"
    v = rows_verdict([ev.get("verdict", "") for ev in evs])
    k0, kmed, ev0 = looseness_summary(evs)
    if v == vd.HOLDS:
        v = vd.loose_word(k0)
    rows = "; ".join(f"{ev.get('quantity', '')} = {fmt(ev['measured'], ev.get('se'))} vs {f(ev.get('bound'))}"
                     for ev in evs[:3])
    key = (f"looseness (bound / (measured + 3 s.e.)): tightest ×{k0:.3g} ({ev0.get('quantity', '')}), median ×{kmed:.3g}"
           f" over {len(evs)} rows; " if k0 is not None else "") + rows + " (95 % normal intervals)"
    return v, key


def _slopes(rep: dict) -> dict[str, dict]:
    out = {}
    for ev in rep["evidence"].get("C4", []):
        q = ev.get("quantity", "")
        if ev.get("verdict") == INFO and "slope" in q and finite(ev.get("measured")):
            name = next((m for m in C4_BOUND_EXPONENT if f"_{m} " in q or q.endswith(m)), None)
            if name:
                out[name] = ev
    return out


def c4_rate(rep: dict) -> tuple[str, str, str]:
    """C4's rate part: the claim orders the ε-blow-up tic (ε⁻⁴) steeper than gmc (ε⁻²); judged on the measured
    log-log slopes: Δ = slope_tic − slope_gmc < 0 predicted (95 % normal interval of Δ against 0)."""
    s = _slopes(rep)
    if "tic" not in s or "gmc" not in s or not finite(s["tic"].get("se")) or not finite(s["gmc"].get("se")):
        return vd.INCONCLUSIVE, "symbolic only", "no measured slopes"
    d = s["tic"]["measured"] - s["gmc"]["measured"]
    se = math.hypot(s["tic"]["se"], s["gmc"]["se"])
    lo, hi = d - 1.96 * se, d + 1.96 * se
    v = vd.interval_verdict(lo, hi, 0.0, above=False)
    key = (f"slope tic − slope gmc = {signed(d, 2)} [{signed(lo, 2)}, {signed(hi, 2)}] (95 % normal), predicted < 0; "
           "measured slopes " + ", ".join(f"{m} {signed(ev['measured'], 2)} ± {1.96 * ev['se']:.2f}" for m, ev in s.items())
           + " vs the bounds' " + ", ".join(f"{m} {e:+d}".replace("-", "−") for m, e in C4_BOUND_EXPONENT.items()))
    note = f"measured over {s['gmc'].get('point', '')}; the bound's order is a statement as ε → 0"
    return v, key, note


def _note_value(note: str, pattern: str) -> float | None:
    m = re.search(pattern, note or "")
    return float(m.group(1)) if m else None


def c7(rep: dict) -> tuple[str, str, str]:
    """C7 on the weighting part (gmc − tis/tic ≤ 0 at the largest G; gmc's decay with G, fig1a) and tis/tic's
    removed mass constant in G (TOST within ±EQUIV_REL of its value at the largest G)."""
    evs = rep["evidence"].get("C7", [])
    if not evs:
        return (vd.HOLDS if rep["theory"]["C7"].get("ok") else vd.INCONCLUSIVE), "symbolic only", ""
    # a refuted row is never hidden, whatever it measures
    verdicts, parts, notes = [vd.REFUTED for ev in judged(rep, "C7") if ev.get("verdict") == vd.REFUTED], [], []
    peak = next((ev for ev in evs if "G at its peak" in ev.get("quantity", "")), None)
    if peak:
        top = _note_value(peak.get("note"), r"peak ([0-9.eE+-]+),")
        m = re.search(r", ([0-9.eE+-]+) at G=(\d+)", peak.get("note") or "")
        if top is not None and m:
            parts.append(f"gmc's weighting bias falls from {top:.2g} (G = {f(peak.get('measured'))}) to "
                         f"{float(m.group(1)):.2g} at G = {m.group(2)}")
    for ev in evs:
        q = ev.get("quantity", "")
        if q.startswith("weighting part") and "gmc − " in q and finite(ev.get("measured")):
            verdicts.append(ev["verdict"] if vd.is_verdict(ev.get("verdict", "")) else vd.INCONCLUSIVE)
            parts.append(f"{q.split(': ')[-1]} = {fmt(ev['measured'], ev.get('se'))}")
        elif "minus G=" in q and finite(ev.get("measured")) and finite(ev.get("se")):
            val = _note_value(ev.get("note"), r"value ([0-9.eE+-]+) at G=")
            if val is None:
                continue
            v, p, lo, hi = vd.equivalence(ev["measured"], ev["se"], EQUIV_REL * abs(val))
            verdicts.append(v)
            name = q.split(":")[0].replace("E removed mass ", "")
            parts.append(f"{name}'s removed mass constant in G: Δ = {ev['measured']:.2g} [{lo:.2g}, {hi:.2g}] within "
                         f"±{EQUIV_REL * abs(val):.2g} (TOST p = {p:.2g}) → {v}")
    mass = next((ev for ev in evs if ev.get("quantity", "").startswith("E removed mass, gmc")), None)
    if mass and finite(mass.get("measured")):
        lo = mass["measured"] - 1.96 * (mass.get("se") or 0)
        k = _k(mass)
        notes.append(f"gmc's removed-mass bound σ²/(4εG) holds (×{k:.3g})" if k else "")
        if lo <= 0:
            notes[-1] += f", but the mass {fmt(mass['measured'], mass.get('se'))} is indistinguishable from 0, so k is noise"
        verdicts.append(vd.REFUTED if mass.get("verdict") == vd.REFUTED else vd.HOLDS)
    v = vd.combine(verdicts) if verdicts else vd.INCONCLUSIVE
    return v, "; ".join(parts), "; ".join(x for x in notes if x)


def c6(rep: dict) -> tuple[str, str, str]:
    """C6 is an assumption of the bound, measured on training runs: its verdict is the inequality's, the note
    says its right-hand side is vacuous (median looseness per instance from fig_c6_overlap)."""
    evs = [ev for ev in judged(rep, "C6") if finite(ev.get("measured"))]
    if not evs:
        return (vd.HOLDS if rep["theory"]["C6"].get("ok") else vd.INCONCLUSIVE), "symbolic only", ""
    v = rows_verdict([ev.get("verdict", "") for ev in evs])
    k0, _, ev0 = looseness_summary(evs)
    if v == vd.HOLDS:
        v = vd.loose_word(k0)
    med = {i: r.get("log10_loose_theory_median") for i, r in (rep.get("c6") or {}).items()
           if finite(r.get("log10_loose_theory_median"))}
    frac = [r.get("frac_holds") for r in (rep.get("c6") or {}).values() if finite(r.get("frac_holds"))]
    key = (f"tightest step ×{k0:.3g} ({ev0.get('point', '').split(',')[0]})" if k0 else "")
    if med:
        key += (f"; median looseness per instance 10^{min(med.values()):.1f} … 10^{max(med.values()):.0f}")
    if frac:
        key += f"; inequality held on {100 * min(frac):.4g} % of the steps (exact χ² per step, no sampling interval)"
    note = ("assumption check: M is fitted from the same run, so the premise holds by construction; the bound is "
            "vacuous as a prediction of σ²")
    return v, key, note


def c5(rep: dict) -> tuple[str, str, str]:
    """C5 (a theorem about the tuned bound): checked symbolically only; the key number says over which G the
    tuned bound's local G-exponent is −2/5 (theory against theory, fig_c5_local_exponent)."""
    ok = rep["theory"]["C5"].get("ok")
    v = vd.HOLDS if ok else vd.INCONCLUSIVE
    ranges = next((m.get("ranges") for m in rep["sidecars"] if m.get("ranges")), None) or {}
    parts = []
    for reg, r in ranges.items():
        parts.append(f"{reg}: G ∈ [{f(r[0])}, {f(r[1])}]" if isinstance(r, list) else f"{reg}: none")
    key = "checked symbolically only (no measured G-exponent)"
    if parts:
        key += "; local G-exponent of the tuned bound within 0.05 of −2/5 — " + ", ".join(parts)
    return v, key, "derived symbolically" + ("" if ok else " (derivation not run or failed)")


def c5t(rep: dict) -> tuple[str, str, str]:
    """C5-T's key number: its test statistic (test A: change of gmc's delay cost over G) per in-scope instance."""
    c = rep.get("c5")
    if not c:
        return vd.OUT_OF_SCOPE, DASH, "no protocol run"
    per = c["per_instance"]
    scoped = {i: r for i, r in per.items() if r.get("in_scope")}
    stats_ = []
    for i, r in scoped.items():
        a = next((x for x in r.get("test_a") or [] if x.get("estimator") == "gmc"), None)
        if a:
            stats_.append(f"{i} {signed(a['change'])} [{signed(a['lo'])}, {signed(a['hi'])}]")
    key = ("test A, change of gmc's delay cost Δ over G (claim: falls by > margin; 90 % bootstrap percentile): "
           + ", ".join(stats_)) if stats_ else DASH
    counts = {w: sum(r.get("verdict") == w for r in scoped.values()) for w in vd.VERDICTS}
    out = [r for r in per.values() if not r.get("in_scope")]
    # the reason of each out-of-scope instance, counted from its own record (v4: C9's saturation guard or the χ² premise)
    n_sat = sum(str(r.get("reason", "")).startswith("saturated") for r in out)
    why = ", ".join(x for x in ((f"{n_sat} saturated (C9's guard)" if n_sat else ""),
                                (f"{len(out) - n_sat} with learning-phase χ² above the premise" if len(out) - n_sat else ""))
                    if x)
    note = (f"{', '.join(f'{w} on {k}' for w, k in counts.items() if k)} of {len(scoped)} in scope; "
            f"{len(out)} out of scope" + (f" ({why})" if why else ""))
    if any("underpowered" in ((r.get("test_b") or {}).get("reason") or "") for r in scoped.values()):
        note += "; test B underpowered"
    return c["verdict"], key, note


def c9(rep: dict) -> tuple[str, str, str]:
    """C9's key number: its main effect, gmc − onpolicy at the primary delay (η tuned), per in-scope instance."""
    c = rep.get("c9")
    if not c:
        return vd.INCONCLUSIVE, DASH, ""
    sat = {r["instance"] for r in c.get("subclaims") or [] if r.get("saturated")}
    main = [x for x in c["comparisons"] if x.get("arm") == "tuned" and x.get("name", "").startswith("gmc − onpolicy")
            and x["instance"] not in sat and finite(x.get("estimate"))]
    key = ("gmc − onpolicy (nAUC, η tuned, paired t at Holm level): " + ", ".join(
        f"{x['instance']} {signed(x['estimate'])} [{signed(x['lo'])}, {signed(x['hi'])}]" for x in main)) if main else DASH
    note = "sub-claims: " + "; ".join(f"{s} {v}" for s, v in c["aggregate"].items())
    return c["verdict"], key, note


def exact(rep: dict, cid: str) -> tuple[str, str, str]:
    """An exact identity: ``holds`` when every row is within 3 s.e. of the prediction (note: exact identity)."""
    evs = [ev for ev in judged(rep, cid) if finite(ev.get("measured")) and finite(ev.get("bound"))]
    note = "exact identity"
    if cid == "C3":
        note += "; true by construction (the bound is defined so that the delay enters only through E𝔅)"
    if not evs:
        ok = rep["theory"][cid].get("ok")
        return (vd.HOLDS if ok else vd.INCONCLUSIVE), ("derived symbolically: " + (rep["theory"][cid].get("summary")
                                                                                    or DASH)), note
    vs = [vd.exact_verdict(ev["measured"], ev.get("se") or 0.0, ev["bound"]) for ev in evs]
    worst = max(evs, key=lambda ev: abs(ev["measured"] - ev["bound"]) / (ev.get("se") or math.inf))
    z = abs(worst["measured"] - worst["bound"]) / (worst.get("se") or math.inf)
    key = (f"{len(evs)} points within 3 s.e.; worst {worst.get('point', '')}: {fmt(worst['measured'], worst.get('se'))}"
           f" vs exact {f(worst['bound'])}, |Δ|/s.e. = {z:.2g}")
    return (vd.REFUTED if vd.REFUTED in vs else vd.HOLDS), key, note


def row(rep: dict, label: str) -> tuple[str, str, str]:
    """``(verdict, key number, note)`` of one verdict-table row."""
    if label in ("C3", "C8"):
        return exact(rep, label)
    if label == "C4-rate":
        return c4_rate(rep)
    fn = {"C5": c5, "C5-T": c5t, "C6": c6, "C7": c7, "C9": c9}.get(label)
    if fn:
        return fn(rep)
    v, key = bound_verdict(rep, label)
    note = {"C2": "optimality (difference ≤ 0)", "C4": "bound part"}.get(label, "")
    if rep["theory"][label].get("ok"):
        note = (note + "; " if note else "") + "derived symbolically"
    return v, key, note


def summary(rep: dict, cid: str) -> str:
    """The claim's verdict word (``C4``: its bound part; ``C4-rate`` its rate)."""
    return row(rep, cid)[0]


def key_number(rep: dict, cid: str) -> str:
    """The key number of a claim row, its interval named."""
    return row(rep, cid)[1]
