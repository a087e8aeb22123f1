"""mutation/equivalent-mutmut.txt stays attached to the code it describes (issue 55), as
tests/test_mutation_equivalents.py does for cosmic-ray's list: each entry names an existing file and function,
its mutated line is one edit away from a line of that function (and is not the line itself), and gives a reason."""
import difflib
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "mutation"))
import mutmut_run  # noqa: E402


def _entries():
    return [pytest.param(path, name, line, reason, id=name.rsplit(".", 1)[-1])
            for (path, name), (line, reason) in mutmut_run._equivalents().items()]


def _function_lines(path: str, func: str) -> list[str]:
    src = (ROOT / path).read_text().splitlines()
    start = next(i for i, ln in enumerate(src) if re.match(rf"\s*def {re.escape(func)}\(", ln))
    indent = len(src[start]) - len(src[start].lstrip())
    out = [src[start].strip()]
    for ln in src[start + 1:]:
        if ln.strip() and len(ln) - len(ln.lstrip()) <= indent:
            break
        out.append(ln.strip())
    return out


@pytest.mark.parametrize("path,name,line,reason", _entries())
def test_each_mutmut_equivalent_entry_points_at_a_line_of_its_function(path, name, line, reason):
    assert (ROOT / path).is_file(), path
    module = path.removesuffix(".py").replace("/", ".")
    m = re.fullmatch(rf"{re.escape(module)}\.x(?:_|ǁ\w+ǁ)(\w+?)__mutmut_\d+", name)  # function, or class ǁ method
    assert m, f"{name}: not a mutmut name of {module}"
    lines = _function_lines(path, m.group(1))
    assert line not in lines, f"{name}: the recorded line is the original, not a mutation"
    swap = {"break": "continue", "continue": "break"}
    if line in swap:  # break <-> continue
        assert swap[line] in lines, f"{name}: {m.group(1)} has no {swap[line]!r} to swap"
    elif line.endswith(", )") and any(ln.startswith(line[:-3] + ",") for ln in lines):
        pass  # the last argument of a call dropped: the line keeps its start
    elif "(None)" in line and any(ln.startswith(line.split("(None)", 1)[0] + "(") for ln in lines):
        pass  # a call's only argument set to None (short lines fall under the ratio)
    elif line.endswith((" = None", ' = ""')) and any(ln.startswith(line.rsplit(" = ", 1)[0] + " = ") for ln in lines):
        pass  # an assignment's value set to None or "": the line keeps its target (short lines fall under the ratio)
    elif line.strip(")"):  # (an argument dropped from the end of a call leaves only its closing parentheses)
        best = max(difflib.SequenceMatcher(None, line, ln).ratio() for ln in lines)
        assert best > 0.75, f"{name}: no line of {m.group(1)} is one edit from {line!r}"
    assert len(reason) > 20


def test_the_list_parses_and_refuses_an_entry_without_a_reason(tmp_path, monkeypatch):
    assert len(_entries()) >= 1
    bad = tmp_path / "eq.txt"
    bad.write_text("a.py | a.x_f__mutmut_1 | x = 1 |\n")
    monkeypatch.setattr(mutmut_run, "EQUIVALENT", bad)
    with pytest.raises(ValueError, match=re.escape("need 'path | mutant | mutated line | reason'")):
        mutmut_run._equivalents()


def test_mutated_lines_are_the_plus_lines_of_a_diff():
    diff = "--- a.py\n+++ a.py\n@@ -1 +1 @@\n-    x = 1\n+    x = 2\n"
    assert mutmut_run.mutated_lines(diff) == ["x = 2"]
