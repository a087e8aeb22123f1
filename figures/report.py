"""The claims report: ``REPORT.md`` and a self-contained ``REPORT.html`` (images inline).

For each claim C1–C9 (THEORY.md §4) it prints the statement, theory's derived result (sympy, from
``theory.claims.CLAIMS``), every measured value with its 95 % CI, the bound at the same point and
the verdict computed by :func:`figures.stats.verdict` from those numbers. Measurements are read from
the figures' JSON sidecars in the output directory (field ``evidence``), so any figure — including
ones written by other parts of the project — contributes by listing rows there::

    {"claim": "C9", "quantity": "...", "point": "...", "measured": 0.1, "se": 0.01,
     "bound": null, "verdict": "holds", "figure": "...", "note": "..."}

A row may also carry ``"regime"`` (a simulator preset of ``simulate.experiments.REGIMES``) and
``"label"`` (a short name of what it checks, e.g. ``"gmc"``); a claim with such rows gets one
verdict per regime (:func:`summary`). A sidecar's ``"regimes"`` field,
``{regime: {"claim", "chi2_median", "d", "what", "criteria"}}``, supplies the one-line description
of each regime printed next to the verdicts (what it is, its median realised χ²).
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import os
from pathlib import Path

from figures import stats

CLAIM_IDS = tuple(f"C{i}" for i in range(1, 10))
#: C9 is empirical: theory/ has no derivation for it (THEORY §3).
STATEMENT_C9 = ("empirical robustness: as the delay grows, is becomes unstable, onpolicy converges worse or slower, "
                "tic/tis degrade, gmc keeps the best final J among stable estimators; its delay penalty shrinks with G")


#: What a claim's measured rows compare, printed under the claims table (the verdict labels alone
#: would hide that C5 compares a measurement with the G-scaling of an upper bound).
CLAIM_NOTES = {
    "C5": ("C5 compares the measured tuned delay term Δ(G) = min_η score(d) − min_η score(0) of the training "
           "simulator (score: average regret) with the G-exponent of the tuned *upper bound* (theory: gmc −2/5, "
           "tic 0). An upper bound's rate is contradicted only by a slower decay: `violated` = the slope's 95 % "
           "bootstrap CI lies above theory's exponent; `loose by ×k` = the CI lies below it (Δ falls faster than "
           "the bound says; k = (G_max/G_min)^(exponent − slope) is how far the bound's G-scaling overstates "
           "Δ(G_max)/Δ(G_min)); `holds` = the CI contains the exponent."),
    "C9": ("C9 is empirical: each part is decided by `simulate.experiments.c9_verdict` from the tuned final J "
           "(η tuned per estimator and delay), in each simulator regime separately: differences are paired over "
           "seeds with Student-t intervals, Bonferroni-corrected over the comparisons; `is` instability is the "
           "step-tail ratio at one fixed η (the grid's median), controlled by onpolicy at the same η; 'stable' "
           "means no divergence at any η of the grid and not failing that tail test. At LM scale "
           "(fig_llm_delay) the verdict is gmc against the best stable rival, paired t over seeds."),
}


def tag(evidence, regime: str, labels=None) -> list[dict]:
    """Evidence rows (``Evidence`` or dicts) as sidecar dicts carrying ``regime`` and, if given, ``label``."""
    labels = [None] * len(evidence) if labels is None else list(labels)
    out = []
    for ev, lab in zip(evidence, labels, strict=True):
        d = ev.to_dict() if hasattr(ev, "to_dict") else dict(ev)
        d["regime"] = regime
        if lab is not None:
            d["label"] = lab
        out.append(d)
    return out


def theory_rows(run_checks: bool = True) -> dict[str, dict]:
    """``{claim id: {statement, result, check}}`` from ``theory.claims`` (or a 'not available' note)."""
    try:
        from theory.claims import CLAIMS
    except Exception as exc:  # noqa: BLE001 — report the gap instead of failing the whole report
        why = f"not available: theory.claims missing ({type(exc).__name__}: {exc})"
        return {c: {"statement": STATEMENT_C9 if c == "C9" else "", "result": why, "check": "—"} for c in CLAIM_IDS}
    rows = {}
    for cid in CLAIM_IDS:
        c = CLAIMS.get(cid)
        if c is None:
            rows[cid] = {"statement": STATEMENT_C9 if cid == "C9" else "", "title": "empirical robustness"
                         if cid == "C9" else "", "result": "empirical (no derivation)" if cid == "C9" else
                         "not available", "check": "—"}
            continue
        if not run_checks:  # deriving costs ~10 s of sympy: skipped when only the layout is wanted
            rows[cid] = {"statement": c.statement, "title": c.title, "result": "(derivation not run)", "check": "—"}
            continue
        try:
            ok = c.check()
            result = c.result
        except Exception as exc:  # noqa: BLE001
            ok, result = False, f"derivation raised {type(exc).__name__}: {exc}"
        rows[cid] = {"statement": c.statement, "title": c.title, "result": result,
                     "check": "—" if ok is None else ("derived ✓" if ok else "FAILED ✗")}
    return rows


def load_sidecars(out_dir) -> list[dict]:
    """Every figure sidecar ``*.json`` in ``out_dir`` that names a figure, in name order."""
    out = []
    for p in sorted(Path(out_dir).glob("*.json")):
        try:
            meta = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(meta, dict) and "figure" in meta:
            meta["_png"] = p.with_suffix(".png") if p.with_suffix(".png").exists() else None
            out.append(meta)
    return out


def _row_cells(ev: dict) -> tuple[str, str, str, str, str, str]:
    m, se, b = ev.get("measured"), ev.get("se"), ev.get("bound")
    at = f"{ev['regime']}: {ev.get('point', '')}" if ev.get("regime") else ev.get("point", "")
    return (ev.get("quantity", ""), at, stats.fmt(m, se), stats.fmt(b), ev.get("verdict", ""),
            ev.get("note", ""))


def _md_escape(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def build(out_dir, *, quick: bool, timings: dict | None = None, failures: dict | None = None,
          run_checks: bool = True, report_path=None) -> dict:
    """Collect everything the report prints (theory rows, evidence per claim, figures, gaps)."""
    from sweep import code_version, git_commit

    sidecars = load_sidecars(out_dir)
    evidence = {c: [] for c in CLAIM_IDS}
    for meta in sidecars:
        for ev in meta.get("evidence", []):
            evidence.setdefault(ev.get("claim", "?"), []).append(ev)
    missing = [(m["figure"], why) for m in sidecars for why in m.get("missing", [])]
    regimes = [dict(info, figure=m["figure"], regime=r) for m in sidecars
               for r, info in (m.get("regimes") or {}).items()]
    return {
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "git_commit": git_commit(),
        "code_version": code_version(),
        "theory": theory_rows(run_checks),
        "evidence": evidence,
        "sidecars": sidecars,
        "missing": missing,
        "regimes": regimes,
        "timings": dict(timings or {}),
        "failures": dict(failures or {}),
        "out_dir": Path(out_dir),
        "report_path": Path(report_path) if report_path else Path(out_dir) / "REPORT.md",
    }


def _rule(vs) -> str | None:
    """Verdict of a set of rows: violated if any is; else holds if all measured hold; None if none measured."""
    if any(v == "violated" for v in vs):
        return "violated"
    measured = [v for v in vs if v.startswith(("holds", "loose"))]
    if measured:
        return "holds" if all(v.startswith("holds") for v in measured) else measured[0] if len(set(measured)) == 1 \
            else "holds (some bounds loose)"
    return None


def _regime_rule(rows) -> str:
    """One regime's verdict: the common verdict, or each verdict with the labels of its rows."""
    measured = [ev for ev in rows if ev.get("verdict", "").startswith(("holds", "loose", "violated"))]
    if not measured:
        # e.g. "inconclusive" (a difference within noise): say it rather than "not measured"
        return ", ".join(dict.fromkeys(ev.get("verdict") for ev in rows if ev.get("verdict"))) or "not measured"
    groups: dict[str, list[str]] = {}
    for ev in measured:
        groups.setdefault(ev["verdict"], []).append(ev.get("label") or ev.get("quantity", "?"))
    if len(groups) == 1:
        return next(iter(groups))
    order = sorted(groups, key=lambda v: (not v.startswith("violated"), v.startswith("loose"), v))
    return "; ".join(f"{v} ({', '.join(groups[v])})" for v in order)


def regime_info(rep: dict, cid: str, regime: str) -> dict | None:
    """The sidecar description of ``regime`` for claim ``cid`` (median χ², d, what), if a figure gave one."""
    for r in rep.get("regimes", []):
        if r.get("regime") == regime and r.get("claim") == cid:
            return r
    return None


def summary(rep: dict, cid: str) -> str:
    """One verdict per claim: violated if any row is; else holds if any measured row holds; else as listed.

    Claims with regime-tagged rows get ``"<regime> (median χ² …): <verdict>"`` per regime, plus
    ``"theory check (scipy vs sympy): <verdict>"`` for their untagged (theory-side) rows.
    """
    evs = rep["evidence"].get(cid, [])
    regimes = list(dict.fromkeys(ev["regime"] for ev in evs if ev.get("regime")))
    if not regimes:
        v = _rule([ev.get("verdict", "") for ev in evs])
        return v if v is not None else ("not measured" if cid != "C3" else "symbolic only")
    parts = []
    untagged = [ev.get("verdict", "") for ev in evs if not ev.get("regime")]
    if untagged and _rule(untagged) is not None:
        parts.append(f"theory check (scipy vs sympy): {_rule(untagged)}")
    for r in regimes:
        info = regime_info(rep, cid, r)
        chi = f" (median χ² {info['chi2_median']:.3g})" if info and info.get("chi2_median") is not None else ""
        parts.append(f"{r}{chi}: {_regime_rule([ev for ev in evs if ev.get('regime') == r])}")
    return "; ".join(parts)


def regime_lines(rep: dict) -> list[str]:
    """One line per (claim, regime): what the regime is, its median realised χ², its criteria."""
    out = []
    for r in rep.get("regimes", []):
        chi = r.get("chi2_median")
        crit = "; ".join(str(c) for c in (r.get("criteria") or {}).values())
        out.append(f"{r.get('claim', '?')}, **{r['regime']}** ({r['figure']}): {r.get('what', '')}; median realised "
                   f"χ²(π_θ‖μ) at d = {r.get('d', '?')}: {'—' if chi is None else f'{chi:.3g}'}"
                   + (f" — criteria: {crit}" if crit else ""))
    return out


def claims_table_md(rep: dict) -> str:
    """The claims table (one row per measured check, grouped by claim)."""
    lines = ["| claim | statement | theory (sympy) | measured quantity | at | measured (95% CI) | bound | verdict | note |",
             "|---|---|---|---|---|---|---|---|---|"]
    for cid in CLAIM_IDS:
        th = rep["theory"][cid]
        evs = rep["evidence"].get(cid) or [{}]
        for i, ev in enumerate(evs):
            q, at, m, b, v, note = _row_cells(ev) if ev else ("—", "—", "—", "—", summary(rep, cid), "")
            first = i == 0
            lines.append("| " + " | ".join(_md_escape(x) for x in (
                f"**{cid}**" if first else "", th["statement"] if first else "",
                f"{th['check']}: {th['result']}" if first else "", q, at, m, b, v, note)) + " |")
    return "\n".join(lines)


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def markdown(rep: dict) -> str:
    """The full ``REPORT.md`` text."""
    rp = rep["report_path"]
    head = [
        "# asyncgrpo — claims report",
        "",
        f"Generated by `python -m figures{' --quick' if rep['quick'] else ''}` on {rep['created']} "
        f"(git `{rep['git_commit']}`, code version `{rep['code_version']}`). "
        f"{'**Quick mode: small samples, wide CIs — not for citing.**' if rep['quick'] else ''}",
        "",
        f"Images are in `{_rel(rep['out_dir'], rp.parent)}/` (PNG + PDF + JSON sidecar with settings, seeds and "
        "commit per figure). The repository keeps the PNGs and sidecars of the last default run (PDFs are "
        "git-ignored); the command regenerates all of them. `REPORT.html` next to this file has them inline.",
        "",
        "Verdicts come from the numbers (figures/stats.py): `violated` if measured − 3·se exceeds the bound; "
        "`loose by ×k` if the bound is more than 2× the measurement; otherwise `holds`. "
        "CIs are 95 % normal intervals (z = 1.96, se = σ̂/√n).",
        "",
        "## Claims",
        "",
        "| claim | verdict |",
        "|---|---|",
        *[f"| {cid} {rep['theory'][cid].get('title', '')} | {summary(rep, cid)} |" for cid in CLAIM_IDS],
        "",
        claims_table_md(rep),
        "",
    ]
    notes = [f"- {CLAIM_NOTES[c]}" for c in CLAIM_IDS if c in CLAIM_NOTES and rep["evidence"].get(c)]
    if rep.get("regimes"):
        head += ["### Simulator regimes", "", *[f"- {line}" for line in regime_lines(rep)], ""]
    if notes:
        head += ["### What the verdicts compare", "", *notes, ""]
    body = ["## Figures", ""]
    for meta in rep["sidecars"]:
        name = meta["figure"]
        t = rep["timings"].get(name)
        body.append(f"### {name}" + (f" ({t:.1f} s)" if t is not None else ""))
        body.append("")
        if meta.get("_png"):
            body.append(f"![{name}]({_rel(meta['_png'], rp.parent)})")
            body.append("")
        for why in meta.get("missing", []):
            body.append(f"- **{why}**")
        if meta.get("missing"):
            body.append("")
    if rep["failures"]:
        body += ["## Figures that failed", ""]
        body += [f"- `{k}`: {_md_escape(v)}" for k, v in rep["failures"].items()]
        body.append("")
    if rep["missing"]:
        body += ["## Not available (upstream pieces missing)", ""]
        body += [f"- {fig}: {why}" for fig, why in rep["missing"]]
        body.append("")
    if rep["timings"]:
        body += ["## Timings", "", "| figure | seconds |", "|---|---|"]
        body += [f"| {k} | {v:.1f} |" for k, v in rep["timings"].items()]
        body.append("")
    return "\n".join(head + body)


def html_page(rep: dict) -> str:
    """A self-contained HTML version: same tables, images embedded as base64 PNG."""
    e = html.escape

    def table(rows, header):
        h = "".join(f"<th>{e(x)}</th>" for x in header)
        b = "".join("<tr>" + "".join(f"<td>{e(str(x))}</td>" for x in r) + "</tr>" for r in rows)
        return f"<table><thead><tr>{h}</tr></thead><tbody>{b}</tbody></table>"

    rows = []
    for cid in CLAIM_IDS:
        th = rep["theory"][cid]
        for i, ev in enumerate(rep["evidence"].get(cid) or [{}]):
            q, at, m, b, v, note = _row_cells(ev) if ev else ("—", "—", "—", "—", summary(rep, cid), "")
            rows.append((cid if i == 0 else "", th["statement"] if i == 0 else "",
                         f"{th['check']}: {th['result']}" if i == 0 else "", q, at, m, b, v, note))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>asyncgrpo claims report</title>",
        "<style>body{font-family:sans-serif;max-width:1200px;margin:auto;font-size:14px}"
        "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top}"
        "th{background:#f3f3f3}img{max-width:100%}.warn{color:#a00}</style></head><body>",
        "<h1>asyncgrpo — claims report</h1>",
        f"<p>Generated by <code>python -m figures{' --quick' if rep['quick'] else ''}</code> on {e(rep['created'])} "
        f"(git <code>{e(rep['git_commit'])}</code>, code version <code>{e(rep['code_version'])}</code>)."
        f"{' <b>Quick mode: small samples, wide CIs.</b>' if rep['quick'] else ''}</p>",
        "<h2>Claims</h2>",
        table([(cid, summary(rep, cid)) for cid in CLAIM_IDS], ("claim", "verdict")),
        table(rows, ("claim", "statement", "theory (sympy)", "measured quantity", "at", "measured (95% CI)", "bound",
                     "verdict", "note")),
    ]
    if rep.get("regimes"):
        parts += ["<h3>Simulator regimes</h3><ul>", *[f"<li>{e(x)}</li>" for x in regime_lines(rep)], "</ul>"]
    notes = [CLAIM_NOTES[c] for c in CLAIM_IDS if c in CLAIM_NOTES and rep["evidence"].get(c)]
    if notes:
        parts += ["<h3>What the verdicts compare</h3><ul>", *[f"<li>{e(x)}</li>" for x in notes], "</ul>"]
    parts.append("<h2>Figures</h2>")
    for meta in rep["sidecars"]:
        parts.append(f"<h3>{e(meta['figure'])}</h3>")
        if meta.get("_png"):
            data = base64.b64encode(Path(meta["_png"]).read_bytes()).decode()
            parts.append(f"<img alt='{e(meta['figure'])}' src='data:image/png;base64,{data}'>")
        parts += [f"<p class='warn'>{e(w)}</p>" for w in meta.get("missing", [])]
    if rep["failures"]:
        parts.append("<h2>Figures that failed</h2><ul>")
        parts += [f"<li><code>{e(k)}</code>: {e(v)}</li>" for k, v in rep["failures"].items()]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(out_dir, report_path=None, *, quick: bool = False, timings=None, failures=None, run_checks=True):
    """Write ``REPORT.md`` (at ``report_path``, default ``<out_dir>/REPORT.md``) and ``REPORT.html`` next to it."""
    rep = build(out_dir, quick=quick, timings=timings, failures=failures, run_checks=run_checks,
                report_path=report_path)
    rp = rep["report_path"]
    rp.parent.mkdir(parents=True, exist_ok=True)
    md, page = markdown(rep), html_page(rep)
    rp.write_text(md)
    rp.with_suffix(".html").write_text(page)
    return rp, rp.with_suffix(".html"), rep
