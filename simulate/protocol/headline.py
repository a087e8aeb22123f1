"""The headline: one rule, from a setting's gmc − rival table to at most one line of advice (issue 53).

Input: the setting's entries ``gmc − rival`` (fields ``rival``, ``d``, ``delta``, ``lo``, ``hi``: an effect and its
interval, positive = gmc better) on the setting's primary arm, the fixed rival set and the delays the protocol
measures. The rule (docs/protocol.md, "Version 6: the headline"):

1. **Every rival at every delay, or no advice.** If a rival of the set has no entry at some measured ``d``, the line
   says ``not measured: X (d = …)`` and recommends nothing.
2. **The best set** at ``d`` is the estimators not significantly behind the best one there. With entries
   ``gmc − rival`` this reads: gmc is in the best set at ``d`` iff no rival is significantly ahead of it
   (no interval entirely below 0).
3. **"use gmc"** only when gmc is in the best set at every measured ``d``.
4. Otherwise the line names the rival that beats gmc by the most (the largest ``−delta`` over the entries whose
   interval lies entirely below 0, ties broken by the rival set's order, then the smaller ``d``), with its delay,
   margin and interval, and the delays at which gmc leaves the best set.

:func:`decide` applies the rule and returns its parts; :func:`line` renders one line of at most
:data:`MAX_CHARS` characters; :func:`lines` renders at most :data:`MAX_LINES` settings.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["Decision", "decide", "line", "lines", "MAX_CHARS", "MAX_LINES", "USE_GMC", "BEATEN", "NOT_MEASURED",
           "NO_DATA"]

MAX_CHARS = 200
MAX_LINES = 3
USE_GMC = "use gmc"
BEATEN = "beaten"
NOT_MEASURED = "not measured"
NO_DATA = "not run"


@dataclass(frozen=True)
class Decision:
    """The rule's outcome for one setting."""

    status: str
    """:data:`USE_GMC`, :data:`BEATEN`, :data:`NOT_MEASURED` or :data:`NO_DATA`."""
    missing: tuple = ()
    """``(rival, d)`` pairs of the rival set with no entry (status :data:`NOT_MEASURED`)."""
    winner: dict | None = None
    """The entry of the rival that beats gmc by the most (status :data:`BEATEN`)."""
    behind_at: tuple = ()
    """The delays at which gmc is outside the best set."""
    ahead: tuple = ()
    """Rivals gmc is significantly ahead of at some ``d`` (status :data:`USE_GMC`)."""
    n_rivals: int = 0
    delays: tuple = field(default=())


def _check(e: dict) -> dict:
    for k in ("rival", "d", "delta", "lo", "hi"):
        if k not in e:
            raise ValueError(f"headline entry lacks {k!r}: {e!r}")
    vals = [e["delta"], e["lo"], e["hi"]]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals):
        raise ValueError(f"headline entry needs finite delta, lo, hi: {e!r}")
    if not e["lo"] <= e["delta"] <= e["hi"]:
        raise ValueError(f"headline entry needs lo <= delta <= hi: {e!r}")
    return e


def decide(entries: list[dict], rivals, delays) -> Decision:
    """Apply the rule of the module docstring to one setting's entries."""
    rivals, delays = tuple(rivals), tuple(sorted(int(d) for d in delays))
    if not rivals or not delays:
        raise ValueError(f"rivals and delays must be non-empty, got {rivals!r}, {delays!r}")
    es = [_check(e) for e in entries if e["rival"] in rivals and int(e["d"]) in delays]
    if not es:
        return Decision(NO_DATA, n_rivals=len(rivals), delays=delays)
    have = {(e["rival"], int(e["d"])) for e in es}
    missing = tuple((r, d) for r in rivals for d in delays if (r, d) not in have)
    if missing:
        return Decision(NOT_MEASURED, missing=missing, n_rivals=len(rivals), delays=delays)
    behind = [e for e in es if e["hi"] < 0]
    if not behind:
        ahead = tuple(dict.fromkeys(e["rival"] for e in es if e["lo"] > 0))
        return Decision(USE_GMC, ahead=ahead, n_rivals=len(rivals), delays=delays)
    order = {r: i for i, r in enumerate(rivals)}
    winner = min(behind, key=lambda e: (e["delta"], order[e["rival"]], int(e["d"])))
    at = tuple(sorted({int(e["d"]) for e in behind}))
    return Decision(BEATEN, winner=winner, behind_at=at, n_rivals=len(rivals), delays=delays)


def _num(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def line(label: str, dec: Decision, no_data: str | None = None, subject: str = "gmc") -> str:
    """One headline line (at most :data:`MAX_CHARS` characters; the label is shortened to fit); ``no_data``
    replaces the text of a setting with no results (e.g. why it has none); ``subject``: the estimator the entries
    are ``subject − rival`` of (``simulate score`` judges a user's map by the same rule)."""
    ds = ", ".join(map(str, dec.delays))
    if dec.status == NO_DATA:
        body = no_data or "not run: no results yet → no recommendation."
    elif dec.status == NOT_MEASURED:
        rs = list(dict.fromkeys(r for r, _ in dec.missing))
        body = f"not measured: {', '.join(rs[:3])}{' …' if len(rs) > 3 else ''} → no recommendation."
    elif dec.status == USE_GMC:
        body = (f"use **{subject}**: not significantly behind any of {dec.n_rivals} rivals at d ∈ {{{ds}}}"
                + (f"; ahead of {len(dec.ahead)}." if dec.ahead else "."))
    else:
        w = dec.winner
        body = (f"use **{w['rival']}**, not {subject}: it beats {subject} at d = {int(w['d'])} by {_num(-w['delta'])} "
                f"[{_num(-w['hi'])}, {_num(-w['lo'])}]; {subject} behind at d ∈ {{{', '.join(map(str, dec.behind_at))}}}.")
    room = MAX_CHARS - len(body) - 2
    if room < 8:
        raise ValueError(f"headline body too long for {MAX_CHARS} characters: {body!r}")
    if len(label) > room:
        label = label[: room - 1] + "…"
    return f"{label}: {body}"


def lines(settings: list[tuple[str, list[dict], tuple]], rivals) -> list[str]:
    """At most :data:`MAX_LINES` lines, one per ``(label, entries, delays)`` setting in the given order (``delays``:
    the delays the setting's protocol measures)."""
    if len(settings) > MAX_LINES:
        raise ValueError(f"at most {MAX_LINES} headline settings, got {len(settings)}")
    return [line(lbl, decide(es, rivals, ds)) for lbl, es, ds in settings]
