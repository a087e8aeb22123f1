"""Checks of a rendered report's text: every verdict cell is a defined verdict word, no Python ``None`` / ``nan``
leaks into the text, no qualifier inside a verdict, the first screen carries the answer, the size limit."""
from __future__ import annotations

import re

from figures.report.data import NOT_RUN_PREFIX
from simulate import verdicts as vd

#: Qualified verdicts the old report used; a qualifier belongs in the note column.
FORBIDDEN = ("holds (exact)", "derived ✓", "FAILED ✗", "(underpowered)", "violated")
#: A verdict column: its header names it (the C9 matrix's instance columns are verdicts too).
_VERDICT_HEADERS = ("verdict", "aggregate")
FIRST_SCREEN = 60
MAX_BYTES = 40_000
_LEAK = re.compile(r"(?<![\w`.])(None|nan|NaN|inf)(?![\w`])")
#: A claim whose evidence is missing or damaged is not judged: its verdict cell says so (figures.report.data.not_run);
#: ``python -m figures.report`` reports the evidence problem itself and exits 1.
NOT_RUN = NOT_RUN_PREFIX


def _tables(text: str):
    """``(header, rows)`` of every markdown table in ``text``."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|(---\|)+$", lines[i + 1]):
            header = _cells(lines[i])
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            yield header, rows
        else:
            i += 1


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]


def verdict_cells(text: str) -> list[str]:
    """Every cell of a verdict column (header containing 'verdict' or 'aggregate', or a C9 sub-claim matrix)."""
    out = []
    for header, rows in _tables(text):
        cols = [j for j, h in enumerate(header) if any(w in h.lower() for w in _VERDICT_HEADERS)
                and "verdict word" not in h.lower()]
        if header and header[0] == "sub-claim":
            cols = list(range(1, len(header)))
        out += [r[j] for r in rows for j in cols if j < len(r)]
    return out


def problems(text: str) -> list[str]:
    """What is wrong with a report's text (empty when nothing is)."""
    out = [f"undefined verdict word {c!r}" for c in verdict_cells(text)
           if c not in ("", "—") and not vd.is_verdict(c) and not c.startswith(NOT_RUN)]
    out += [f"qualifier inside a verdict: {w!r}" for w in FORBIDDEN if w in text]
    out += [f"Python value leaked as text: {m.group(0)!r} in …{text[max(0, m.start() - 40):m.end() + 20]!r}…"
            for m in _LEAK.finditer(text)]
    return out


def first_screen_problems(text: str, n_lines: int = FIRST_SCREEN) -> list[str]:
    """The first ``n_lines`` must hold the answer table (its header cell ``gmc − rival``, one row per rival of the
    confirmatory protocol) and the reconstruction caveat."""
    head = "\n".join(text.splitlines()[:n_lines])
    out = []
    if "| gmc − rival |" not in head:
        out.append(f"the answer table is not within the first {n_lines} lines")
    if "reconstruction" not in head or "not the paper" not in head:
        out.append(f"the reconstruction caveat is not within the first {n_lines} lines")
    return out


def size_problems(text: str, max_bytes: int = MAX_BYTES) -> list[str]:
    """The main report must stay under ``max_bytes`` (UTF-8)."""
    n = len(text.encode())
    return [f"the report is {n} bytes > {max_bytes}"] if n > max_bytes else []
