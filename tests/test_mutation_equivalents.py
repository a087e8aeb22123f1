"""mutation/equivalent.txt stays attached to the code it describes (issue 39).

An entry names a mutant by ``path:line:col:operator``, the position of the token cosmic-ray edits. An edit above
it shifts the lines, and the entry then silently names nothing (or another mutant), so the file's "equivalent"
count drifts from its reasons. Each entry must still point at the token its operator replaces (``-`` for a unary
minus, a number for NumberReplacer, ``>=`` for ``GtE_*``, ``True`` for ReplaceTrueWithFalse, …)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT = ROOT / "mutation" / "equivalent.txt"
#: The token each operator family edits (the text at the entry's position starts with it).
_CMP = {"Eq": "==", "NotEq": "!=", "Lt": "<", "LtE": "<=", "Gt": ">", "GtE": ">=", "Is": "is", "IsNot": "is not",
        "In": "in", "NotIn": "not in"}
_BIN = {"Add": "+", "Sub": "-", "Mul": "*", "Div": "/", "FloorDiv": "//", "Mod": "%", "Pow": "**"}


def _token(operator: str) -> str | None:
    op = operator.split("/", 1)[1].split("#", 1)[0]
    if op == "NumberReplacer":
        return "<number>"
    if op.startswith("ReplaceUnaryOperator_"):
        parts = op.split("_")  # ReplaceUnaryOperator_USub_UAdd, or ReplaceUnaryOperator_Delete_USub
        return {"USub": "-", "UAdd": "+", "Not": "not", "Invert": "~"}[parts[2] if parts[1] == "Delete" else parts[1]]
    if op.startswith("ReplaceComparisonOperator_"):
        return _CMP[op.split("_")[1]]
    if op.startswith("ReplaceBinaryOperator_"):
        return _BIN[op.split("_")[1]]
    return {"ReplaceTrueWithFalse": "True", "ReplaceFalseWithTrue": "False", "ReplaceAndWithOr": "and",
            "ReplaceOrWithAnd": "or", "ReplaceBreakWithContinue": "break",
            "ReplaceContinueWithBreak": "continue"}.get(op)


def _entries():
    for n, raw in enumerate(EQUIVALENT.read_text().splitlines(), 1):
        if raw.strip() and not raw.lstrip().startswith("#"):
            key = raw.split("|", 1)[0].strip()
            path, line, col, operator = key.split(":", 3)
            yield pytest.param(path, int(line), int(col), operator, id=f"line{n}:{path.rsplit('/', 1)[-1]}:{line}:{col}")


@pytest.mark.parametrize("path,line,col,operator", list(_entries()))
def test_each_equivalent_entry_points_at_the_token_its_operator_edits(path, line, col, operator):
    token = _token(operator)
    assert token is not None, f"operator {operator!r}: add the token it edits to this test"
    lines = (ROOT / path).read_text().splitlines()
    assert line <= len(lines), f"{path} has {len(lines)} lines, the entry names line {line}"
    text = lines[line - 1][col:]
    if token == "<number>":
        assert re.match(r"\d|\.\d", text), f"{path}:{line}:{col} is {text[:30]!r}, not a number"
    else:
        assert text.startswith(token), f"{path}:{line}:{col} is {text[:30]!r}, not {token!r} ({operator})"
