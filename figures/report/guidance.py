"""Practical ε and G guidance, one computed sentence per overlap regime, from the regime map's slices at η₀.

On each slice (G ∈ the map's G at the primary ε, and ε ∈ the map's ε at the primary G, η = η₀ tuned at
d = 0) the sentence names the ε and the G at which gmc's nAUC (normalised per sampled trajectory, so a
larger G costs the same budget) is highest at the primary delay, per instance, grouped by the instance's
overlap regime (local / far, from protocol C9's learning-phase χ²), and whether gmc − onpolicy turns
significant anywhere on the slice.
"""
from __future__ import annotations

from collections import Counter

from figures.report.data import finite


def _best(cs: list[dict], key: str) -> dict[str, float]:
    """Per instance, the value of ``key`` (G or eps) with the highest gmc nAUC."""
    out = {}
    for inst in dict.fromkeys(c["instance"] for c in cs):
        rows = [c for c in cs if c["instance"] == inst and finite(c.get("nauc_gmc"))]
        if rows:
            out[inst] = max(rows, key=lambda c: c["nauc_gmc"])[key]
    return out


def theory_sentence(rep: dict) -> str:
    """The tuned C5 bound at the training's ε and G (fig_heatmap's ``training_point``), when present."""
    tp = next((m["training_point"] for m in rep["sidecars"] if m.get("training_point")), None)
    if not tp:
        return ""
    est = tp.get("estimators") or {}
    return (f"Theory (tuned C5 bound, d = {tp.get('d'):g}, other constants the heat map's defaults, not measured): at "
            f"G = {tp['G']} the bound's best ε is " + ", ".join(f"{e:.2g} for {n}" for n, e in
                                                               ((n, v["eps_star"]) for n, v in est.items()))
            + f"; the training's ε = {tp['eps']} costs a factor " + ", ".join(
                f"{v['cost_factor']:.3g} ({n})" for n, v in est.items()) + " in the bound.")


def sentences(rep: dict) -> list[str]:
    """One sentence per regime on choosing ε and G, then the bound's view (empty when nothing is measured)."""
    out = _measured(rep)
    t = theory_sentence(rep)
    return out + ([t] if t else [])


def _measured(rep: dict) -> list[str]:
    rm = rep.get("regime_map") or {}
    st = rm.get("settings") or {}
    c9 = rep.get("c9") or {}
    d = ((rep.get("protocol") or {}).get("primary") or {}).get("d")
    G0, e0 = st.get("primary_G"), st.get("primary_eps")
    if not rm.get("comparisons") or d is None or G0 is None or e0 is None:
        return []
    base = [c for c in rm["comparisons"] if c.get("comparison") == "gmc − onpolicy" and c.get("arm", "common") == "common"
            and abs(float(c["eta_factor"]) - 1.0) < 1e-12 and int(c["d"]) == int(d)]
    g_slice = [c for c in base if abs(float(c["eps"]) - float(e0)) < 1e-12]
    e_slice = [c for c in base if int(c["G"]) == int(G0)]
    bestG, bestE = _best(g_slice, "G"), _best(e_slice, "eps")
    regime = {r["instance"]: r.get("regime") for r in c9.get("subclaims") or [] if r.get("regime")}
    out = []
    for reg in dict.fromkeys(regime.values()):
        insts = [i for i, r in regime.items() if r == reg and i in bestG and i in bestE]
        if not insts:
            continue
        gs = Counter(bestG[i] for i in insts).most_common()
        es = Counter(bestE[i] for i in insts).most_common()
        ahead = [c for c in g_slice + e_slice if c["instance"] in insts and finite(c.get("lo")) and c["lo"] > 0]
        out.append(
            f"{reg.capitalize()} overlap ({len(insts)} instance{'s' if len(insts) > 1 else ''}: {', '.join(insts)}), "
            f"d = {d}, η₀: gmc's nAUC is highest at G = " + ", ".join(f"{g} on {k}" for g, k in gs)
            + " and ε = " + ", ".join(f"{e:g} on {k}" for e, k in es)
            + f" (slices G ∈ {sorted({int(c['G']) for c in g_slice})} at ε = {e0}, ε ∈ "
            f"{sorted({float(c['eps']) for c in e_slice})} at G = {G0}); gmc − onpolicy is significantly positive "
            + (f"in {len(ahead)} of these cells" if ahead else "in none of these cells")
            + " (95 % paired t, no multiplicity correction).")
    return out
