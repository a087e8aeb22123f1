"""The claims report: ``REPORT.md`` and a self-contained ``REPORT.html`` (images inline), one source.

The report is a list of blocks (heading, paragraph, list, table, image) built from the figures'
JSON sidecars, then rendered twice (:func:`markdown`, :func:`html_page`). In order:

1. provenance (commit of a clean tree, or a visible DIRTY stamp; the protocol's hash), and for
   ``--quick`` a banner "quick: not a verdict";
2. **Key findings**: 3–7 sentences generated from the verdicts and numbers;
3. the compact verdict table (claim, one-line statement, verdict, key number) and the decision rule,
   stated once;
4. the training claims under the pre-registered protocol: C9's sub-claim × instance matrix and its
   comparisons at the primary cell, C5 per instance (premise χ², tests A and B), the LM row;
5. the evidence table per claim, then every figure with its caption, then timings.

Verdict words are those of :mod:`simulate.verdicts` only: ``holds``, ``holds, bound loose ×k``,
``refuted``, ``inconclusive``, ``out of scope``. A figure contributes by listing evidence rows in
its sidecar (``claim``, ``quantity``, ``point``, ``measured``, ``se``, ``bound``, ``verdict``, ``note``),
a ``caption``, and for the protocol figures the structures under ``c9`` / ``c5`` / ``protocol``.
"""
from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import math
import os
import re
from pathlib import Path

from figures import stats
from simulate import verdicts as vd

CLAIM_IDS = tuple(f"C{i}" for i in range(1, 10))
#: C9 is empirical: theory/ has no derivation for it (docs/THEORY.md §3).
STATEMENT_C9 = ("as the delay grows, is becomes unstable, onpolicy and tic/tis degrade, and gmc keeps the best "
                "objective among the stable estimators")
LM_FIGURE = "fig_llm_delay"
RULE = (
    "**How verdicts are decided** (one rule, simulate/verdicts.py). A bound check is `refuted` when the measurement "
    "minus 3 standard errors exceeds the bound, `holds, bound loose ×k` when the bound is more than twice the "
    "measurement (k = bound / measurement), otherwise `holds`. A training comparison names an effect Δ (paired over "
    "held-out seeds) and a threshold fixed in the protocol before the data: +δ for a claimed difference, −δ for "
    "'best or tied'. Two one-sided t-tests, Holm-corrected over the comparisons of one claim on one instance, give "
    "`holds` (interval entirely beyond the threshold), `refuted` (entirely on the other side) or `inconclusive` "
    "(the interval overlaps it); failure rates use Clopper–Pearson intervals against p₀ the same way. A claim whose "
    "premise is not met at the measured point is `out of scope`, with the measurement, never refuted. Across "
    "instances: `holds` if it holds on at least 3/4 of the in-scope instances and is refuted on none, `refuted` if "
    "refuted on a strict majority, otherwise `inconclusive`."
)


# --------------------------------------------------------------------------- data
def theory_rows(run_checks: bool = True) -> dict[str, dict]:
    """``{claim id: {statement, title, result, check}}`` from ``theory.claims`` (C9 is empirical)."""
    from theory.claims import CLAIMS

    rows = {}
    for cid in CLAIM_IDS:
        c = CLAIMS.get(cid)
        if c is None:
            rows[cid] = {"statement": STATEMENT_C9 if cid == "C9" else "", "title": "empirical robustness"
                         if cid == "C9" else "", "result": "empirical (no derivation)", "check": "—", "ok": None}
            continue
        if not run_checks:  # deriving costs ~10 s of sympy: skipped when only the layout is wanted
            rows[cid] = {"statement": c.statement, "title": c.title, "result": "(derivation not run)", "check": "—",
                         "ok": None}
            continue
        try:
            ok = c.check()
            result = c.result
        except Exception as exc:  # noqa: BLE001 — a failing derivation is reported, not hidden
            ok, result = False, f"derivation raised {type(exc).__name__}: {exc}"
        rows[cid] = {"statement": c.statement, "title": c.title, "result": result, "ok": ok,
                     "summary": c.summary if ok is not None else None,
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


def build(out_dir, *, quick: bool, timings: dict | None = None, failures: dict | None = None,
          run_checks: bool = True, report_path=None, provenance: dict | None = None) -> dict:
    """Collect everything the report prints. ``provenance`` = ``{"commit", "dirty"}`` captured when the
    run started (the run itself rewrites tracked figure files)."""
    from sweep import code_version, git_commit

    sidecars = load_sidecars(out_dir)
    evidence = {c: [] for c in CLAIM_IDS}
    lm = []
    for meta in sidecars:
        for ev in meta.get("evidence", []):
            (lm if meta["figure"] == LM_FIGURE else evidence.setdefault(ev.get("claim", "?"), [])).append(ev)
    if provenance is None:
        commit = git_commit()
        provenance = {"commit": commit.removesuffix("-dirty"), "dirty": commit.endswith("-dirty")}
    protocol = next((m["protocol"] for m in sidecars if m.get("protocol")), None)
    return {
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "provenance": provenance,
        "code_version": code_version(),
        "theory": theory_rows(run_checks),
        "evidence": evidence,
        "lm": lm,
        "lm_meta": next((m for m in sidecars if m["figure"] == LM_FIGURE), None),
        "c9": next((m["c9"] for m in sidecars if m.get("c9")), None),
        "c5": next((m["c5"] for m in sidecars if m.get("c5")), None),
        "protocol": protocol,
        "sidecars": sidecars,
        "missing": [(m["figure"], why) for m in sidecars for why in m.get("missing", [])],
        "timings": dict(timings or {}),
        "failures": dict(failures or {}),
        "out_dir": Path(out_dir),
        "report_path": Path(report_path) if report_path else Path(out_dir) / "REPORT.md",
    }


# --------------------------------------------------------------------------- verdicts
_LOOSE = re.compile(r"^holds, bound loose ×(.+)$")
#: An evidence row that reports a number without judging anything (e.g. a fitted slope next to a
#: bound's order, theory against theory): shown as "—", never counted as a verdict.
INFO = "reported"


def rows_verdict(verdicts) -> str:
    """One verdict from a claim's evidence rows: refuted if any row is; holds if all hold (``bound loose
    ×k`` with the tightest k when every row is loose); out of scope if all are; otherwise inconclusive."""
    vs = [v for v in verdicts if v and v != INFO]
    if not vs:
        return vd.INCONCLUSIVE
    for v in vs:
        if not vd.is_verdict(v):
            raise ValueError(f"evidence verdict {v!r} is outside the vocabulary {vd.VERDICTS}")
    if any(v == vd.REFUTED for v in vs):
        return vd.REFUTED
    scoped = [v for v in vs if v != vd.OUT_OF_SCOPE]
    if not scoped:
        return vd.OUT_OF_SCOPE
    if all(v.startswith("holds") for v in scoped):
        ks = [_LOOSE.match(v).group(1) for v in scoped if _LOOSE.match(v)]
        if ks and len(ks) == len(scoped):
            return f"holds, bound loose ×{min(ks, key=_kval)}"
        return vd.HOLDS
    return vd.INCONCLUSIVE


def _kval(k: str) -> float:
    try:
        return float(k)
    except ValueError:
        return math.inf


def summary(rep: dict, cid: str) -> str:
    """The claim's verdict: C5/C9 from the protocol's aggregate; the others from their evidence rows;
    a claim with no measurement takes its symbolic check (derived → holds)."""
    if cid == "C9" and rep.get("c9"):
        return rep["c9"]["verdict"]
    if cid == "C5" and rep.get("c5"):
        return rep["c5"]["verdict"]
    evs = [ev for ev in rep["evidence"].get(cid, []) if ev.get("verdict") != INFO]
    if evs:
        return rows_verdict([ev.get("verdict", "") for ev in evs])
    ok = rep["theory"][cid].get("ok")
    return vd.HOLDS if ok else vd.INCONCLUSIVE


def key_number(rep: dict, cid: str) -> str:
    """The one number a reader should see next to the verdict."""
    if cid == "C9" and rep.get("c9"):
        agg = rep["c9"]["aggregate"]
        counts = {v: sum(x == v for x in agg.values()) for v in vd.VERDICTS}
        return ", ".join(f"{n} sub-claims {v}" for v, n in counts.items() if n)
    if cid == "C5" and rep.get("c5"):
        per = rep["c5"]["per_instance"]
        scoped = [i for i, r in per.items() if r.get("in_scope")]
        return f"in scope on {len(scoped)}/{len(per)} instances"
    evs = [ev for ev in rep["evidence"].get(cid, []) if ev.get("measured") is not None and ev.get("verdict") != INFO]
    if not evs:
        return "symbolic" if rep["theory"][cid].get("ok") else "—"
    ev = evs[0]
    b = f" vs bound {stats.fmt(ev['bound'])}" if ev.get("bound") is not None else ""
    return f"{ev.get('quantity', '')} = {stats.fmt(ev['measured'], ev.get('se'))}{b}"


def key_findings(rep: dict) -> list[str]:
    """3–7 plain sentences generated from the verdicts and numbers (never written by hand)."""
    out = []
    th = rep["theory"]
    derived = [c for c in CLAIM_IDS if th[c].get("ok")]
    failed = [c for c in CLAIM_IDS if th[c].get("ok") is False]
    if derived or failed:
        out.append(f"The symbolic derivations check for {', '.join(derived) or 'no claim'}"
                   + (f"; they fail for {', '.join(failed)}." if failed else "."))
    bounds = [c for c in ("C1", "C2", "C4", "C6", "C7", "C8") if rep["evidence"].get(c)]
    if bounds:
        out.append("On the exact Monte Carlo instances: " + "; ".join(f"{c} {summary(rep, c)}" for c in bounds) + ".")
    c9 = rep.get("c9")
    if c9:
        n = len(next(iter(c9["matrix"].values()), {}))
        parts = "; ".join(f"{s} {v}" for s, v in c9["aggregate"].items())
        out.append(f"Training robustness (C9) over {n} instances under the pre-registered protocol is "
                   f"{c9['verdict']}: {parts}.")
        vs = [c for c in c9["comparisons"] if c.get("subclaim") == "gmc-best-or-tied" and "onpolicy" in c.get("name", "")]
        if vs:
            txt = ", ".join(f"{c['instance']} {c['estimate']:+.3f} [{c['lo']:+.3f}, {c['hi']:+.3f}]" for c in vs)
            out.append(f"gmc minus onpolicy (no correction) in normalised AUC at the largest delay: {txt} "
                       "(a negative value means the uncorrected learner did better).")
    c5 = rep.get("c5")
    if c5:
        per = c5["per_instance"]
        oos = {i: r for i, r in per.items() if not r.get("in_scope")}
        s = f"The G-scaling of the delay cost (C5) is {c5['verdict']} over {len(per)} instances"
        if oos:
            chis = ", ".join(f"{r['chi2_median']:.2g}" for r in oos.values())
            s += f"; out of scope on {', '.join(oos)} (median χ² {chis} > 1)"
        out.append(s + ".")
    if rep.get("lm"):
        v = rows_verdict([ev.get("verdict", "") for ev in rep["lm"]])
        by = {w: [ev.get("quantity", "").removeprefix("LM scale: ") for ev in rep["lm"] if ev.get("verdict") == w]
              for w in (vd.REFUTED, vd.HOLDS, vd.INCONCLUSIVE)}
        parts = [f"{w}: {', '.join(q)}" for w, q in by.items() if q]
        out.append(f"On the small language model (LM row) the same claim is {v} — " + "; ".join(parts) + ".")
    return out[:7]


# --------------------------------------------------------------------------- blocks
def _f(x, digits=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def _training_blocks(rep: dict) -> list:
    b = []
    pm = rep.get("protocol")
    if not pm:
        return b
    b += [("h2", "Training claims under the pre-registered protocol"),
          ("p", f"Protocol `{pm['name']}` (registered {pm['registered']}), sha256 `{pm['sha256']}`"
                + (" — **quick: not a verdict**" if pm.get("quick") else "") + f". Instances: {', '.join(pm['instances'])}. "
                f"η tuned per cell on seeds {pm['tune_seeds']}; every number below is on the held-out seeds "
                f"{pm['eval_seeds'][0]}…{pm['eval_seeds'][-1]} ({len(pm['eval_seeds'])}). Metric: normalised area under "
                f"the learning curve over {pm['budget']} sampled trajectories; margin δ = {pm['margin']}, α = {pm['alpha']} "
                f"(one-sided, Holm), failure rate p₀ = {pm['failure_p0']}, local overlap χ² ≤ {pm['local_chi2']}. "
                "Protocol: docs/protocol.md.")]
    c9 = rep.get("c9")
    if c9:
        insts = list(next(iter(c9["matrix"].values()), {}).keys())
        rows = [[s, *[c9["matrix"][s].get(i) or "—" for i in insts], c9["aggregate"][s]] for s in c9["matrix"]]
        regime = {r["instance"]: f"{r['regime']} (χ² {_f(r['chi2_median'], 2)})" for r in c9["subclaims"]}
        b += [("h3", f"C9 — {c9['verdict']}"),
              ("p", f"Primary cell ε = {pm['primary']['eps']}, G = {pm['primary']['G']}, d = {pm['primary']['d']} "
                    f"against d = 0. Regime of the primary cell per instance (median realised χ² of gmc's runs): "
                    + "; ".join(f"{i}: {regime.get(i, '—')}" for i in insts) + f". η at a grid edge after widening in "
                    f"{c9['n_edge']} of {c9['n_cells']} cells."),
              ("table", ["sub-claim", *insts, "aggregate"], rows)]
        comp = [[c["instance"], c["subclaim"], c.get("name", ""), _f(c["estimate"]), f"[{_f(c['lo'])}, {_f(c['hi'])}]",
                 _f(c["threshold"]), c["verdict"]] for c in c9["comparisons"]]
        b += [("details", "C9 comparisons (held-out seeds; interval at each test's Holm level)",
               ["instance", "sub-claim", "comparison", "estimate", "interval", "threshold", "verdict"], comp)]
        pe, pG, pd_ = pm["primary"]["eps"], pm["primary"]["G"], pm["primary"]["d"]
        prim = [c for c in c9.get("cells", []) if c["G"] == pG and c["d"] in (0, pd_)
                and abs(c["eps"] - pe) < 1e-12]
        prim.sort(key=lambda c: (c["instance"], c["estimator"], c["d"]))
        b += [("details", "Every estimator at the primary cell: secondary metrics (held-out seeds, tuned η)",
               ["instance", "estimator", "d", "nAUC", "final nJ", "zero-gradient steps", "failure rate", "η tuned",
                "η window (octaves within δ)", "η at grid edge"],
               [[c["instance"], c["estimator"], c["d"], _f(c["nauc"]), _f(c["final_nJ"]), _f(c["zero_frac"], 2),
                 _f(c["failure_rate"], 2), _f(c["eta_tuned"]), _f(c["window_octaves"], 2),
                 "yes" if c["eta_at_edge"] else "no"] for c in prim])]
        edge = [c for c in c9.get("cells", []) if c.get("eta_at_edge")]
        if edge:
            b.append(("p", "Cells whose tuned η is still at a grid edge after widening: " + "; ".join(
                f"{c['instance']}/{c['estimator']} d={c['d']} ε={c['eps']} G={c['G']} (η={_f(c['eta_tuned'])})"
                for c in edge) + "."))
    c5 = rep.get("c5")
    if c5:
        rows = []
        for inst, r in c5["per_instance"].items():
            a = {x["estimator"]: x for x in (r.get("test_a") or [])}
            tb = r.get("test_b") or {}
            rows.append([inst, _f(r.get("chi2_median"), 2), "yes" if r.get("in_scope") else "no",
                         " / ".join(f"{e}: {_f(x['change'])} [{_f(x['lo'])}, {_f(x['hi'])}] {x['verdict']}"
                                    for e, x in a.items()) or "—",
                         (f"{_f(tb.get('diff'))} [{_f(tb.get('lo'))}, {_f(tb.get('hi'))}] {tb.get('verdict', '')}"
                          + (f" ({tb['reason']})" if tb.get("reason") else "")) if tb else "—",
                         (f"{_f(tb.get('slope_gmc'))} vs theory "
                          + "/".join(f"{x:+.2f}" for x in tb.get("theory_local_exponent") or [])) if tb else "—",
                         r["verdict"] + (f" — {r['reason']}" if r.get("reason") else "")])
        b += [("h3", f"C5 — {c5['verdict']}"),
              ("p", f"Δ(G) = nAUC(d=0) − nAUC(d={pm['c5']['d']}) at K = {pm['c5']['steps']} steps for every G ∈ "
                    f"{pm['c5']['G']}. Test A: change of Δ over the G range at a fixed η (gmc must fall below "
                    f"−{pm['c5']['flat_margin']}, tic must stay within ±{pm['c5']['flat_margin']}). Test B: slope of "
                    f"log Δ̄ on log G, gmc minus tic, must lie below −{pm['c5']['slope_margin']}."),
              ("table", ["instance", "median χ²", "premise met", "test A (change of Δ over G)",
                         "test B (slope gmc − tic)", "gmc slope vs local exponent of the tuned bound at each G",
                         "verdict"], rows)]
    if rep.get("lm"):
        meta = rep.get("lm_meta") or {}
        b += [("h3", f"LM row — {rows_verdict([ev.get('verdict', '') for ev in rep['lm']])}"),
              ("p", "Small language model (simulate/llm), paired over seeds, same rule"
                    + (f"; protocol hash `{meta.get('protocol_hash')}`" if meta.get("protocol_hash") else "") + "."),
              ("table", ["quantity", "at", "estimate", "verdict", "interval and rule"],
               # the estimate alone: its interval (t, at the comparison's Holm level) is in the note, so no
               # second, differently computed interval can disagree with the verdict
               [[ev.get("quantity", ""), ev.get("point", ""), _f(ev.get("measured")),
                 ev.get("verdict", ""), ev.get("note", "")] for ev in rep["lm"]])]
    return b


def blocks(rep: dict) -> list:
    """The report as blocks: ``(kind, …)`` with kind ∈ h1, h2, h3, p, ul, table, details, img."""
    prov = rep["provenance"]
    stamp = (f"git `{prov['commit']}` (clean tree)" if not prov.get("dirty") else
             f"git `{prov['commit']}` — **DIRTY TREE: uncommitted changes (--allow-dirty); not reproducible from "
             f"the commit**")
    b = [("h1", "asyncgrpo — claims report"),
         ("p", f"Generated by `python -m figures{' --quick' if rep['quick'] else ''}` on {rep['created']}, {stamp}, "
               f"code version `{rep['code_version']}`"
               + (f", protocol `{rep['protocol']['name']}@{rep['protocol']['sha256'][:12]}`" if rep.get("protocol") else "")
               + ".")]
    if rep["quick"]:
        b.append(("p", "**Quick mode: small samples — not a verdict.** Regenerate with `make run` for the report."))
    b += [("h2", "Key findings"), ("ul", key_findings(rep)),
          ("h2", "Verdicts"),
          ("table", ["claim", "statement", "verdict", "key number"],
           [[f"**{c}** {rep['theory'][c].get('title', '')}", rep["theory"][c]["statement"], summary(rep, c),
             key_number(rep, c)] for c in CLAIM_IDS]),
          ("p", RULE)]
    b += _training_blocks(rep)
    ev_rows = []
    for cid in CLAIM_IDS:
        th = rep["theory"][cid]
        ev_rows.append([f"**{cid}**", "theory (sympy)", "", th.get("summary") or th["result"], "", th["check"], ""])
        for ev in rep["evidence"].get(cid, []):
            v = ev.get("verdict", "")
            ev_rows.append(["", ev.get("quantity", ""), ev.get("point", ""), stats.fmt(ev.get("measured"), ev.get("se")),
                            stats.fmt(ev.get("bound")), "— (reported, no verdict)" if v == INFO else v,
                            ev.get("note", "")])
    b += [("h2", "Evidence per claim"),
          ("details", "every measured check (Monte Carlo intervals: ±1.96 se)",
           ["claim", "quantity", "at", "measured", "bound", "verdict", "note"], ev_rows)]
    b.append(("h2", "Figures"))
    for meta in rep["sidecars"]:
        name = meta["figure"]
        t = rep["timings"].get(name)
        b.append(("h3", name + (f" ({t:.1f} s)" if t is not None else "")))
        if meta.get("_png"):
            b.append(("img", name, meta["_png"]))
        cap = meta.get("caption") or (meta.get("settings") or {}).get("caption")
        if cap:
            b.append(("p", f"*{cap}*"))
        if meta.get("missing"):
            b.append(("ul", [f"**{w}**" for w in meta["missing"]]))
    if rep["failures"]:
        b += [("h2", "Figures that failed"), ("ul", [f"`{k}`: {v}" for k, v in rep["failures"].items()])]
    if rep["timings"]:
        b += [("h2", "Timings"), ("table", ["figure", "seconds"], [[k, f"{v:.1f}"] for k, v in rep["timings"].items()])]
    return b


def readme_block(rep: dict) -> str:
    """The README's "What the checks found" block: key findings and one verdict per claim, generated
    from the same data as the report so the two cannot drift (tests/test_readme.py checks it)."""
    lines = [f"- {x}" for x in key_findings(rep)]
    lines += ["", "| claim | verdict | key number |", "|---|---|---|"]
    lines += [f"| {c} {rep['theory'][c].get('title', '')} | {summary(rep, c)} | {_md_cell(key_number(rep, c))} |"
              for c in CLAIM_IDS]
    prov = rep["provenance"]
    lines += ["", f"From the report of git `{prov['commit'][:12]}`"
                  + (" (DIRTY tree)" if prov.get("dirty") else "") + f", {rep['created'][:10]}."]
    return "\n".join(lines)


README_START, README_END = "<!-- verdicts:start -->", "<!-- verdicts:end -->"


def update_readme(readme: Path, rep: dict) -> bool:
    """Replace the block between the README's verdict markers; returns whether the file changed."""
    text = readme.read_text()
    a, b = text.find(README_START), text.find(README_END)
    if a < 0 or b < a:
        raise ValueError(f"{readme} lacks the markers {README_START} … {README_END}")
    new = text[: a + len(README_START)] + "\n" + readme_block(rep) + "\n" + text[b:]
    if new != text:
        readme.write_text(new)
    return new != text


# --------------------------------------------------------------------------- renderers
def _md_cell(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _rel(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def markdown(rep: dict) -> str:
    """The full ``REPORT.md`` text."""
    out = []
    for blk in blocks(rep):
        kind = blk[0]
        if kind in ("h1", "h2", "h3"):
            out += ["#" * int(kind[1]) + " " + blk[1], ""]
        elif kind == "p":
            out += [blk[1], ""]
        elif kind == "ul":
            out += [f"- {x}" for x in blk[1]] + [""]
        elif kind in ("table", "details"):
            header, rows = blk[-2], blk[-1]
            if kind == "details":
                out += [f"<details><summary>{blk[1]}</summary>", ""]
            out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            out += ["| " + " | ".join(_md_cell(x) for x in r) + " |" for r in rows]
            out += ["", "</details>", ""] if kind == "details" else [""]
        elif kind == "img":
            out += [f"![{blk[1]}]({_rel(Path(blk[2]), rep['report_path'].parent)})", ""]
    return "\n".join(out)


def _inline_md(s: str) -> str:
    s = html.escape(str(s))
    s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
    s = re.sub(r"`(.+?)`", r"<code>\1</code>", s)
    return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", s)


def html_page(rep: dict) -> str:
    """The same blocks as a self-contained HTML page (images embedded as base64 PNG)."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>asyncgrpo claims report</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:auto;font-size:14px}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
             "vertical-align:top}th{background:#f3f3f3}img{max-width:100%}</style></head><body>"]
    for blk in blocks(rep):
        kind = blk[0]
        if kind in ("h1", "h2", "h3"):
            parts.append(f"<{kind}>{_inline_md(blk[1])}</{kind}>")
        elif kind == "p":
            parts.append(f"<p>{_inline_md(blk[1])}</p>")
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{_inline_md(x)}</li>" for x in blk[1]) + "</ul>")
        elif kind in ("table", "details"):
            header, rows = blk[-2], blk[-1]
            t = ("<table><thead><tr>" + "".join(f"<th>{_inline_md(h)}</th>" for h in header) + "</tr></thead><tbody>"
                 + "".join("<tr>" + "".join(f"<td>{_inline_md(x)}</td>" for x in r) + "</tr>" for r in rows)
                 + "</tbody></table>")
            parts.append(f"<details><summary>{_inline_md(blk[1])}</summary>{t}</details>" if kind == "details" else t)
        elif kind == "img":
            data = base64.b64encode(Path(blk[2]).read_bytes()).decode()
            parts.append(f"<img alt='{html.escape(blk[1])}' src='data:image/png;base64,{data}'>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write(out_dir, report_path=None, *, quick: bool = False, timings=None, failures=None, run_checks=True,
          provenance: dict | None = None):
    """Write ``REPORT.md`` (at ``report_path``, default ``<out_dir>/REPORT.md``) and ``REPORT.html`` next to it."""
    rep = build(out_dir, quick=quick, timings=timings, failures=failures, run_checks=run_checks,
                report_path=report_path, provenance=provenance)
    rp = rep["report_path"]
    rp.parent.mkdir(parents=True, exist_ok=True)
    md, page = markdown(rep), html_page(rep)
    rp.write_text(md)
    rp.with_suffix(".html").write_text(page)
    return rp, rp.with_suffix(".html"), rep
