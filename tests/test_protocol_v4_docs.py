"""docs/protocol.md quotes the current protocol's numbers: each is checked against the file (issue 34; seen
failing on the v3-era page, which said p₀ = 0.1, G ∈ {4, 8, 32} for C5, "d ≤ 1" and pointed at the v1 file)."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from simulate.protocol import load_protocol
from simulate.protocol.spec import DEFAULT_PATH

DOC = (Path(__file__).resolve().parents[1] / "docs" / "protocol.md").read_text(encoding="utf-8")
P = load_protocol()


def _field(name: str):
    if name.startswith("c5."):
        return P.c5[name[3:]]
    v = getattr(P, name)
    return list(v) if isinstance(v, tuple) else v


def test_every_quoted_number_of_the_current_file_matches_it():
    rows = re.findall(r"^\| [^|`]*\(`([\w.]+)`\) \| ([^|]+) \|$", DOC, flags=re.M)
    assert len(rows) >= 15  # the table exists and is read
    for name, text in rows:
        want, got = _field(name), ast.literal_eval(text.strip())
        if name in ("tune_seeds", "eval_seeds"):
            want = len(want)
        assert got == want, f"docs/protocol.md quotes {name} = {got!r}, the protocol file has {want!r}"


def test_the_page_points_at_the_current_file_and_names_its_instances_and_rules():
    assert f"[`simulate/protocol/{DEFAULT_PATH.name}`]" in DOC and f"version {P.version}**" in DOC
    assert "d ≤ 1" not in DOC  # the premise is χ² ≤ 1
    c9 = DOC[DOC.index("**C9**, on each instance"):DOC.index("**C5-T** uses")]
    assert set(re.findall(r"p₀ = ([\d.]+)", c9)) == {f"{P.failure_p0:g}"}
    c5 = DOC[DOC.index("**C5-T** uses"):DOC.index("## Verdicts")]
    assert "G ∈ {" + ", ".join(str(g) for g in P.c5["G"]) + "}" in c5
    p = P.primary
    assert f"ε = {p['eps']:g}, G = {p['G']}, d = {p['d']}" in c9
    for inst in P.instances:
        assert f"**{inst}**" in DOC, inst
