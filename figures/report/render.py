"""The report as blocks, rendered to ``REPORT.md`` (the answer first, ≤ 40 KB), ``REPORT-details.md`` (the
appendix: every big table) and one self-contained ``REPORT.html`` (both, images inline).

Blocks are ``(kind, …)`` with kind ∈ h1, h2, h3, p, ul, table, details, img. The main report opens with
the answer (three computed recommendation lines, the one gmc-minus-rival table, the caveat), then the
regime-map and LM figures, the sidecars' ``sections``, the verdict table with its note column, the rule
and the glossary (each verdict word defined once, in simulate.verdicts). ``details`` blocks and the
sidecars' ``appendix_tables`` go to the appendix only.
"""
from __future__ import annotations

import base64
import html
import os
import re
from pathlib import Path

from figures.report import answer, claims, exploratory, findings, guidance, training
from figures.report.data import CLAIM_IDS, DASH, INFO, LM_FIGURE, REGIME_FIGURE, build, clean, finite, md_cell
from figures.stats import fmt
from simulate import verdicts as vd

#: Kind of each verdict-table row and how it is judged (docs/THEORY.md §4): printed once, with the rule.
KIND_RULES = {
    "bound": "measured ≤ bound; refuted iff measured − 3 s.e. > bound; looseness k = bound / (measured + 3 s.e.), "
             "tightest and median over the rows",
    "rate": "an exponent of a bound, derived by sympy; measured only where the measurement could show that order",
    "optimality": "the minimiser against the compared members of 𝒲_ε (difference ≤ 0, as a bound)",
    "exact identity": "measured = predicted within 3 s.e. (note: exact identity)",
    "limit": "the G → ∞ behaviour at the largest G; 'constant in G' by a two-sided equivalence test (TOST)",
    "assumption check": "an assumption of a bound, measured on runs",
    "empirical (training)": "paired comparisons over held-out seeds under the pre-registered protocol",
}
RULE = ("**How verdicts are decided** (one rule, simulate/verdicts.py). Every interval is named with its level. A verdict "
        "word is used only where a measurement could have given the opposite word, named in the note (falsifier); "
        "otherwise the row takes a no-test word. A bound is `refuted` only when the measurement minus 3 standard errors "
        "exceeds it, otherwise it holds; `holds, bound loose ×k` when k = bound / (measurement + 3 s.e.) > 2. A "
        "comparison names an effect Δ (paired over held-out seeds) and a threshold fixed in the protocol before the data "
        "(+δ for a claimed difference, −δ for 'best or tied'); two one-sided t-tests, Holm-corrected within one claim on "
        "one instance, give `holds` (interval entirely beyond the threshold), `refuted` (entirely on the other side) or "
        "`inconclusive`; failure rates use Clopper–Pearson intervals against p₀ the same way. Unmet premise or broken "
        "arm: `out of scope`, with the measurement. Across instances: `holds` on ≥ 3/4 of the in-scope instances and "
        "refuted on none, `refuted` on a strict majority, otherwise `inconclusive`. Qualifiers are in the note column.")
LABELS = {"C4": " (bound)", "C4-rate": " (rate)"}
#: Figures whose sections are exploratory (chosen or seen before protocol v6): rendered in the appendix only.
EXPLORATORY_SECTIONS = ("fig_bridge",)


def _head(rep: dict) -> list:
    """The stamp: who wrote the report and, separately, what made its numbers (the sidecars' own commit, code and
    protocol hashes, never the rebuilding code's when they differ); then every missing or damaged sidecar and the
    rows it leaves not run (issue 56)."""
    prov = rep["provenance"]
    tree = (f"git `{prov['commit'][:12]}` (clean tree)" if not prov.get("dirty") else
            f"git `{prov['commit'][:12]}` — **DIRTY TREE: uncommitted changes (--allow-dirty); not reproducible**")
    sts = rep.get("stamps") or []
    cur = (rep.get("rebuilt_by") or {}).get("code", rep["code_version"])
    same = len(sts) == 1 and sts[0]["commit"].removesuffix("-dirty") == prov["commit"] and sts[0]["code"] == cur

    def protocols(names) -> str:  # ", protocol `name@hash12`" per ``name@sha256`` (evidence.stamp's form)
        return "".join(f", protocol `{x.split('@')[0]}@{x.split('@')[-1][:12]}`" for x in names or [])

    def one(g):
        return (f"git `{g['commit'][:12]}`{'-dirty' if g['commit'].endswith('-dirty') else ''}, code `{g['code']}`"
                + protocols(g.get("protocols"))
                + f" ({len(g['files'])} sidecar{'s' * (len(g['files']) != 1)}"
                + ("" if g["sealed"] == len(g["files"]) else
                   (", unsealed, stamp checked against git" if g["verified"] == len(g["files"])
                    else ", unsealed, dirty tree: stamp unverified" if not g["verified"] else f", {g['verified']} verified"))
                + ")")

    if same or not sts:
        # every protocol the sidecars ran (v5, v6, the LM's), not only the C5/C9 one
        protos = (sts[0].get("protocols") if sts else None) or (
            [f"{rep['protocol']['name']}@{rep['protocol']['sha256']}"] if rep.get("protocol") else [])
        text = (f"Generated by `python -m figures{' --quick' if rep['quick'] else ''}` on {rep['created']}, {tree}, "
                f"code `{rep['code_version']}`"
                + protocols(protos))
    else:
        text = (f"Numbers made by {'; '.join(one(g) for g in sts)}. Report written on {rep['created']} from these "
                f"sidecars at {tree}, code `{cur}`" + (" (not the code that made the numbers)"
                                                       if any(g["code"] != cur for g in sts) else ""))
    b = [("p", text + (", estimator plugins " + ", ".join(f"`{m}@{h[:12]}`" for m, h in sorted(rep["plugins"].items()))
                       if rep.get("plugins") else "") + ".")]
    b.append(("p", rep.get("verify") or "Kernel-path check (`make verify`): never run on this tree."))
    if rep["quick"]:
        b.append(("p", "**Quick mode: small samples — not a verdict.** Regenerate with `make run` for the report."))
    probs = rep.get("evidence_problems") or []
    if probs:
        b.append(("p", f"**Evidence missing or damaged ({len(probs)} sidecar{'s' * (len(probs) != 1)}): the rows "
                       "they judge are not run, never judged from what is left.**"))
        b.append(("ul", [f"`{pb['file']}`: {clean(pb['reason'])} → {', '.join(pb['rows']) or 'no claim row'} not run"
                         for pb in probs]))
        nr = rep.get("not_run") or {}
        b.append(("ul", [f"**{r}**: {clean(t)}" for r, t in nr.items()]))
    return b


def answer_blocks(rep: dict, details_link: str) -> list:
    """The first screen: the recommendation, the one table and its note, the caveat."""
    ents = answer.entries(rep)
    header, rows, note = answer.table(rep, ents)
    return [("h2", "The answer: what should a trainer with stale rollouts do?"),
            ("ul", answer.recommendation(rep, ents)),
            ("p", "**gmc − each rival** (protocol v6, confirmatory; the headline above is computed from this table "
                  "by one rule, simulate/protocol/headline.py):"),
            ("table", header, rows),
            ("p", note),
            *advice_blocks(rep),
            ("p", answer.CAVEAT + f" Every big table: {_link(Path(details_link).name, details_link)}."),
            ]


def advice_blocks(rep: dict) -> list:
    """One line per delay on the first screen: the ε, G, η each estimator's tuning picks at a fixed trajectory budget
    and its held-out nAUC (fig_eps_G_advice; exploratory), pointing to the full table (both budget modes)."""
    rows = next((m.get("advice") for m in rep["sidecars"] if m.get("advice")), None)
    if not rows:
        return []
    import math

    def one(r):
        eps = "" if r["estimator"] == "grpo" else f"ε = {r['eps']:g}, "
        return (f"{r['estimator']} {eps}G = {r['G']}, η ≈ 2^{math.log2(r['eta_median']):.0f}: {r['iqm']:.3f} "
                f"[{r['lo']:.3f}, {r['hi']:.3f}]")

    lines = [f"d = {d}: " + "; ".join(one(r) for r in rows if r["d"] == d and r["mode"] == "budget")
             for d in dict.fromkeys(r["d"] for r in rows)]
    return [("p", "**ε, G and η for your delay** (exploratory; protocol v6's LM-like draws, a fixed trajectory budget; "
                  "held-out nAUC IQM [95 % stratified bootstrap]; the fixed-steps rows, which remove the confound that a "
                  "small G also takes more steps, are in the section \"Choosing ε, G and η for your delay\" below): "
                  + " · ".join(lines) + ".")]


def claim_rows(rep: dict) -> list[list[str]]:
    """The verdict table: claim, kind, verdict, note, key number."""
    out = []
    for label in claims.ROWS:
        cid = label.split("-rate")[0]
        th = rep["theory"][cid]
        r = claims.checked(rep, label)  # a test word without its falsifier raises (issue 54)
        note = "; ".join(x for x in (r["note"], (f"falsifier: {r['falsifier']}" if r["falsifier"] else "")) if x)
        kind = "rate" if label == "C4-rate" else "bound" if label == "C4" else th.get("kind", "")
        if label == "C6":
            kind = "assumption check"
        out.append([f"**{cid}**{LABELS.get(label, '')} {th.get('title', '')}", kind, r["verdict"], note or DASH, r["key"]])
    return out


def _cells(rows) -> list[list]:
    """A sidecar table's rows with missing or non-finite numbers shown as ``—``, never as ``None``/``nan``."""
    return [[x if finite(x) or isinstance(x, str) else DASH for x in r] for r in rows]


def _section(s: dict) -> list:
    b = [("h3", s.get("title", ""))] + [("p", p) for p in s.get("paragraphs") or []]
    for t in s.get("tables") or []:
        b += ([("p", f"*{t['title']}*")] if t.get("title") else []) + [("table", t["columns"], _cells(t["rows"]))]
        b += [("p", t["note"])] if t.get("note") else []
    return b


def _figure(meta: dict, rep: dict) -> list:
    name = meta["figure"]
    t = rep["timings"].get(name)
    b = [("h3", name + (f" ({t:.1f} s)" if t is not None else ""))]
    if meta.get("_png"):
        b.append(("img", name, meta["_png"]))
    cap = meta.get("caption") or (meta.get("settings") or {}).get("caption")
    if cap:
        b.append(("p", f"*{cap}*"))
    if meta.get("missing"):
        b.append(("ul", [f"**{w}**" for w in meta["missing"]]))
    return b


def blocks(rep: dict) -> list:
    """The main report's blocks (the answer first; big tables are the appendix's)."""
    details = rep["details_path"]
    link = os.path.relpath(details, rep["report_path"].parent)
    b = [("h1", "asyncgrpo — does group-mass capping (gmc) help with stale rollouts?"), *_head(rep)]
    b += answer_blocks(rep, Path(link).as_posix())
    first = sorted((m for m in rep["sidecars"] if m["figure"] in (REGIME_FIGURE, LM_FIGURE)),
                   key=lambda m: m["figure"] != REGIME_FIGURE)
    if first:
        b.append(("h2", "Exploratory figures: the regime map (protocol v5's instances) and the LM (LM protocol v7)"))
        for meta in first:
            b += _figure(meta, rep)
    for meta in rep["sidecars"]:
        if meta["figure"] in EXPLORATORY_SECTIONS:
            continue  # the appendix's (exploratory.exploratory_blocks): exploratory text never sits beside the answer
        for s in meta.get("sections") or []:
            b += _section(s)
    b += [("h2", "Verdicts"),
          ("table", ["claim", "kind", "verdict", "note", "key number (interval named)"], claim_rows(rep)),
          ("p", RULE),
          ("table", ["verdict word", "meaning"], [[f"`{w}`", m] for w, m in vd.DEFINITIONS.items()]),
          ("table", ["kind", "how a measurement judges it"], [[k, v] for k, v in KIND_RULES.items()])]
    guide = guidance.sentences(rep)
    if guide:
        b += [("h2", "Choosing ε and G (measured on the regime map's slices)"), ("ul", guide)]
    kf = findings.key_findings(rep)  # the long sentences (C9, regime map, LM) are the appendix's
    b += [("h2", "Key findings"), ("ul", kf[:2] + (["The long-form findings on C9, the regime map and the LM row: "
                                                   "the appendix."] if kf[2:] else []))]
    # the per-sub-claim training text is long: the main file keeps the sections above and links it (≤ 40 KB)
    b += [("h2", "Training claims under the pre-registered protocol"),
          ("p", "C9's sub-claim × instance matrix, C5-T per instance and the LM row's parts, in full: "
                + _link("the appendix", Path(link).as_posix()) + ".")]
    b.append(("h2", "Other figures"))
    for meta in rep["sidecars"]:
        if meta["figure"] not in (REGIME_FIGURE, LM_FIGURE):
            b += _figure(meta, rep)
    if rep["failures"]:
        b += [("h2", "Figures that failed"), ("ul", [f"`{k}`: {v}" for k, v in rep["failures"].items()])]
    return b


def detail_blocks(rep: dict) -> list:
    """The appendix: statements, every evidence row, the big training tables, sidecars' appendix tables, timings."""
    b = [("h1", "asyncgrpo — report appendix (every table)"), *_head(rep),
         ("p", f"The answer, the verdicts and the figures: {_link(rep['report_path'].name, rep['report_path'].name)}."),
         ("h2", "Claim statements"),
         ("table", ["claim", "statement", "symbolic check"],
          [[f"**{c}** {rep['theory'][c].get('title', '')}", rep["theory"][c]["statement"],
            (vd.SYMBOLIC + ": the derivation went through (sympy); a derivation is no measurement")
            if rep["theory"][c].get("ok") else
            (vd.INCONCLUSIVE + " (derivation failed)") if rep["theory"][c].get("ok") is False else DASH]
           for c in CLAIM_IDS])]
    ev_rows = []
    for cid in CLAIM_IDS:
        th = rep["theory"][cid]
        ev_rows.append([f"**{cid}**", "theory (sympy)", "", th.get("summary") or th["result"], "",
                        vd.SYMBOLIC if th.get("ok") else DASH, "the derivation went through" if th.get("ok") else ""])
        for ev in rep["evidence"].get(cid, []):
            v = ev.get("verdict", "")
            k = vd.looseness(ev.get("measured"), ev.get("se"), ev.get("bound"))
            ev_rows.append(["", ev.get("quantity", ""), ev.get("point", ""), fmt(ev.get("measured"), ev.get("se")),
                            fmt(ev.get("bound")), DASH if v == INFO else v,
                            "; ".join(x for x in (("reported, no verdict" if v == INFO else ""),
                                                  (f"k = {k:.3g}" if k and v != INFO else ""), clean(ev.get("note"))) if x)])
    b += [("h2", "Evidence per claim"),
          ("details", "Every measured check (Monte Carlo: estimate [95 % normal interval, ±1.96 s.e.]; k: the one "
                      "looseness, bound / (measured + 3 s.e.))",
           ["claim", "quantity", "at", "measured", "bound", "verdict", "note"], ev_rows)]
    kf = findings.key_findings(rep)[2:]
    if kf:
        b += [("h2", "Key findings, long form"), ("ul", kf)]
    b += training.training_blocks(rep)
    b += exploratory.exploratory_blocks(rep)
    for meta in rep["sidecars"]:
        if meta["figure"] in EXPLORATORY_SECTIONS:
            for s in meta.get("sections") or []:
                b += _section(s)
    for meta in rep["sidecars"]:
        for t in meta.get("appendix_tables") or []:
            b += [("details", t.get("title", meta["figure"]), t["columns"], _cells(t["rows"]))]
            b += [("p", t["note"])] if t.get("note") else []
    if rep["timings"]:
        b += [("h2", "Timings"), ("table", ["figure", "seconds"], [[k, f"{v:.1f}"] for k, v in rep["timings"].items()])]
    return b


def readme_block(rep: dict) -> str:
    """The README's generated block: the answer (recommendation, table, caveat) and one verdict per claim row,
    from the same data as the report so the two cannot drift (tests/test_readme.py checks it)."""
    ents = answer.entries(rep)
    header, rows, note = answer.table(rep, ents)
    lines = [f"- {x}" for x in answer.recommendation(rep, ents)] + [""]
    lines += _md_table(header, rows) + ["", note, "", answer.CAVEAT, ""]
    lines += _md_table(["claim", "kind", "verdict", "note", "key number (interval named)"], claim_rows(rep))
    prov = rep["provenance"]
    lines += ["", f"From the report of git `{prov['commit'][:12]}`" + (" (DIRTY tree)" if prov.get("dirty") else "")
              + f", {rep['created'][:10]}: {_link('figures/REPORT.md', 'figures/REPORT.md')}."]
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
def _link(text: str, target: str) -> str:
    """A markdown link (built from parts: the link checker reads string literals as prose)."""
    return "[" + text + "](" + target + ")"


def _md_table(header, rows) -> list[str]:
    return (["| " + " | ".join(md_cell(h) for h in header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(md_cell(x) for x in r) + " |" for r in rows])


def markdown(bs: list, base: Path) -> str:
    """Markdown text of blocks; images linked relative to ``base`` (the report's folder)."""
    out = []
    for blk in bs:
        kind = blk[0]
        if kind in ("h1", "h2", "h3"):
            out += ["#" * int(kind[1]) + " " + blk[1], ""]
        elif kind == "p":
            out += [blk[1], ""]
        elif kind == "ul":
            out += [f"- {x}" for x in blk[1]] + [""]
        elif kind == "table":
            out += _md_table(blk[1], blk[2]) + [""]
        elif kind == "details":
            out += [f"### {blk[1]}", ""] + _md_table(blk[2], blk[3]) + [""]
        elif kind == "img":
            out += [f"![{blk[1]}]({Path(os.path.relpath(Path(blk[2]), base)).as_posix()})", ""]
    return "\n".join(out)


def _inline_md(s: str) -> str:
    s = html.escape(str(s))
    s = re.sub(r"\[([^\]]+)\]\(([^)]+)\)", r"<a href='\2'>\1</a>", s)
    s = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", s)
    s = re.sub(r"`(.+?)`", r"<code>\1</code>", s)
    return re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"<i>\1</i>", s)


def html_page(bs: list) -> str:
    """The blocks as one self-contained HTML page (images embedded as base64 PNG)."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>asyncgrpo claims report</title>",
             "<style>body{font-family:sans-serif;max-width:1200px;margin:auto;font-size:14px}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 6px;"
             "vertical-align:top}th{background:#f3f3f3}img{max-width:100%}</style></head><body>"]
    for blk in bs:
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
    """Write ``REPORT.md`` (default ``<out_dir>/REPORT.md``), ``REPORT-details.md`` and ``REPORT.html`` beside it;
    returns ``(md path, html path, rep)``."""
    rep = build(out_dir, quick=quick, timings=timings, failures=failures, run_checks=run_checks,
                report_path=report_path, provenance=provenance)
    rp = rep["report_path"]
    rp.parent.mkdir(parents=True, exist_ok=True)
    main, details = blocks(rep), detail_blocks(rep)
    rp.write_text(markdown(main, rp.parent))
    rep["details_path"].write_text(markdown(details, rp.parent))
    rp.with_suffix(".html").write_text(html_page(main + details[1:]))
    return rp, rp.with_suffix(".html"), rep
