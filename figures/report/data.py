"""What the report reads: the figures' JSON sidecars, the symbolic checks, and small formatting helpers.

Every number the report prints comes from :func:`build`'s dictionary, itself only the sidecars in one
folder (``figures/out`` for the committed report) plus ``theory.claims``' derivations, so the report can
be rebuilt from committed sidecars without re-running a figure (``python -m figures.report``).
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from pathlib import Path

from figures.report.names import (  # noqa: F401  (the report's names; data re-exports them)
    CLAIM_IDS, DASH, EMPIRICAL, INFO, LM_FIGURE, REGIME_FIGURE, TRAINING_IDS, VERDICT_FIGURE)


def theory_rows(run_checks: bool = True) -> dict[str, dict]:
    """``{claim id: {statement, title, result, ok, kind, summary}}`` from ``theory.claims`` (C5-T, C9 empirical)."""
    from theory.claims import CLAIMS

    rows = {}
    for cid in CLAIM_IDS:
        c = CLAIMS.get(cid)
        if c is None:
            title, statement = EMPIRICAL.get(cid, ("", ""))
            rows[cid] = {"statement": statement, "title": title, "result": "empirical (no derivation)", "ok": None,
                         "kind": "empirical (training)"}
            continue
        if not run_checks:  # deriving costs ~10 s of sympy: skipped when only the layout is wanted
            rows[cid] = {"statement": c.statement, "title": c.title, "result": "(derivation not run)", "ok": None,
                         "kind": c.kind}
            continue
        try:
            ok = c.check()
            result = c.result
        except Exception as exc:  # noqa: BLE001 — a failing derivation is reported, not hidden
            ok, result = False, f"derivation raised {type(exc).__name__}: {exc}"
        rows[cid] = {"statement": c.statement, "title": c.title, "result": result, "ok": ok, "kind": c.kind,
                     "summary": c.summary if ok else None}
    return rows


from figures.report.evidence import (  # noqa: E402,F401  (evidence integrity; data is the report's one entry)
    RENAMED, EXPECTED, expected_figures, PROTOCOL_KEYS, SEAL_ALGORITHM, LOADER_KEYS, _CODE_AT, _this_tree, code_at,
    _HEX, canonical, seal, stamp, registered_protocols, _kind, REQUIRED, _row_problem, structure_problems,
    _stamped, read_sidecar, check_evidence, NOT_RUN_PREFIX, not_run_record, not_run,
)


def load_sidecars(out_dir) -> list[dict]:
    """Every readable, consistent figure sidecar ``*.json`` in ``out_dir``, in name order (a renamed figure's
    stale sidecar left out when the new one is there). Damaged ones are left out here and reported by
    :func:`check_evidence`, which :func:`build` calls: they are never skipped silently."""
    return check_evidence(out_dir, expected=())[0]


def stamps(sidecars: list[dict]) -> list[dict]:
    """The distinct stamps of the sidecars: ``[{"commit", "code", "protocols", "files", "sealed", "verified"}]``, most
    files first (``verified``: how many were checked, by their seal or against git)."""
    groups: dict[tuple, dict] = {}
    for m in sidecars:
        st = stamp(m)
        g = groups.setdefault((st["commit"], st["code"]), {**st, "protocols": [], "files": [], "sealed": 0,
                                                           "verified": 0})
        g["files"].append(m.get("_file") or f"{m['figure']}.json")
        g["sealed"] += bool(m.get("_sealed"))
        g["verified"] += bool(m.get("_verified"))
        g["protocols"] += [x for x in st["protocols"] if x not in g["protocols"]]
    return sorted(groups.values(), key=lambda g: -len(g["files"]))


def build(out_dir, *, quick: bool, timings: dict | None = None, failures: dict | None = None,
          run_checks: bool = True, report_path=None, provenance: dict | None = None, expected=None,
          exclude: dict | None = None, strict: bool = False) -> dict:
    """Collect everything the report prints. ``provenance`` = ``{"commit", "dirty"}`` captured when the
    run started (the run itself rewrites tracked figure files). ``expected``: the sidecars that must be there
    (default none: only those present are checked; ``python -m figures.report`` passes :func:`expected_figures`); a
    missing or damaged one is listed in ``evidence_problems`` and the
    rows it judges in ``not_run``, never judged. ``stamps`` holds what made the sidecars (``code_version`` is theirs
    when they agree; ``rebuilt_by`` the code that rebuilt the report)."""
    from sweep import code_version, git_commit

    # by default only the sidecars present are checked (a --quick or --only run writes a subset, and the rows of the
    # figures it did not run read as before); `python -m figures.report` expects every figure's (expected_figures())
    sidecars, problems = check_evidence(out_dir, expected=() if expected is None else expected, exclude=exclude,
                                        strict=strict)
    evidence = {c: [] for c in CLAIM_IDS}
    lm = []
    for meta in sidecars:
        for ev in meta.get("evidence", []):
            cid = ev.get("claim", "?")
            # the protocol figure's C5 rows are training evidence: they judge C5-T, never the theorem C5
            cid = TRAINING_IDS.get((meta["figure"], cid), cid)
            (lm if meta["figure"] == LM_FIGURE else evidence.setdefault(cid, [])).append(ev)
    if provenance is None:
        commit = git_commit()
        provenance = {"commit": commit.removesuffix("-dirty"), "dirty": commit.endswith("-dirty")}
    report_path = Path(report_path) if report_path else Path(out_dir) / "REPORT.md"
    sts = stamps(sidecars)
    current = code_version()
    return {
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "provenance": provenance,
        # the code that made the numbers: the sidecars' own stamp, never the rebuilding code's when they differ
        "code_version": (sts[0]["code"] if len(sts) == 1 else
                         "several: " + ", ".join(g["code"] for g in sts) if sts else current),
        "rebuilt_by": {"commit": provenance["commit"], "code": current},
        "stamps": sts,
        "evidence_problems": problems,
        "not_run": not_run(problems),
        # {module: sha256} of the $ASYNCGRPO_ESTIMATORS plugins loaded in the run (empty: built-ins only)
        "plugins": next((m["estimator_plugins"] for m in sidecars if m.get("estimator_plugins")), {}),
        "theory": theory_rows(run_checks),
        "evidence": evidence,
        "lm": lm,
        "lm_meta": next((m for m in sidecars if m["figure"] == LM_FIGURE), None),
        "c9": next((m["c9"] for m in sidecars if m.get("c9")), None),
        "c5": next((m["c5"] for m in sidecars if m.get("c5")), None),
        "c6": next((m["c6"] for m in sidecars if m.get("c6")), None),
        "regime_map": next((m for m in sidecars if m["figure"] == REGIME_FIGURE), None),
        "protocol": next((m["protocol"] for m in sidecars if m.get("protocol")), None),
        "sidecars": sidecars,
        "missing": [(m["figure"], why) for m in sidecars for why in m.get("missing", [])],
        "verify": _verify_line(),
        "timings": dict(timings or {}),
        "failures": dict(failures or {}),
        "out_dir": Path(out_dir),
        "report_path": report_path,
        "details_path": report_path.with_name(report_path.stem + "-details.md"),
    }


def _verify_line() -> str:
    """The last `make verify`'s result (figures/verify.py), or why it cannot be quoted."""
    from figures.report import verify_stamp

    try:
        return verify_stamp.stamp_line(verify_stamp.load_stamp())
    except ValueError as err:
        return f"Kernel-path check (`make verify`): stamp not quoted ({err})."


# --------------------------------------------------------------------------- formatting (never "None"/"nan")
def finite(x) -> bool:
    """A real, finite number (not None, not NaN/inf, not a bool)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def f(x, digits=3) -> str:
    """A number in ``digits`` significant digits, ``—`` for a missing/non-finite one, text unchanged."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def n(x) -> str:
    """A count from a JSON table (floats where the column also holds NaN) as an integer, ``—`` if missing."""
    return str(int(x)) if finite(x) else DASH


def signed(x, digits=3) -> str:
    """``+0.252`` / ``−0.113`` (fixed decimals), ``—`` if missing."""
    return f"{x:+.{digits}f}".replace("-", "−") if finite(x) else DASH


def per_G(ess, G):
    """The tabular learner records the weight ESS ``(Σw)²/Σw²`` in [1, G]; tables print it as a fraction of G."""
    if not finite(ess) or not finite(G):
        return None
    return float(ess) / float(G)


_LEAK = re.compile(r"(?<![\w`.])(None|nan|NaN)(?![\w`])")


def clean(text) -> str:
    """Free text from a sidecar with a Python ``None``/``nan`` leaked into it: each shown as ``— (missing)``
    (the figure should not write them; tests/test_report.py fails on any that reaches the report)."""
    return _LEAK.sub("— (missing)", str(text or ""))


def md_cell(s) -> str:
    """A markdown table cell: pipes escaped, one line."""
    return str(s).replace("|", "\\|").replace("\n", " ")
