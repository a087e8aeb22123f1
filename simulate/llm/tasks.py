"""Procedural tasks with verifiable rewards ``R(τ) ∈ {0, 1}`` and a held-out split.

Two task families, generated from a seed:

- **arithmetic**: ``a+b`` with ``a, b`` uniform in ``[0, 10^digits)``; the completion is the sum.
- **countdown**: ``k`` numbers in 1..9 and a target reachable by construction; the completion is an
  expression over ``+ - *`` and parentheses that uses each offered number at most once and equals
  the target (any correct expression scores, not only the generating one).

The split is a stable hash of the prompt text (``zlib.crc32``), so a problem is held out or not
independently of the seed that drew it: the RL and warm-start samplers never see held-out prompts.

The reward is exact match through a parser that never raises: malformed output (unknown characters,
unbalanced parentheses, huge numbers, empty text) scores 0.
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import numpy as np

from simulate.llm.config import TaskConfig

_MAX_EXPR_CHARS = 64
_MAX_DEPTH = 8
_MAX_NUMBER_DIGITS = 7


@dataclass(frozen=True)
class Problem:
    """One prompt with its verifier data."""

    kind: str
    """``arithmetic`` or ``countdown``."""
    prompt: str
    """Compact prompt for the character tokenizer, e.g. ``A12+34=`` or ``C3,5,7>22:``."""
    question: str
    """Natural-language prompt for a checkpoint's chat template."""
    solution: str
    """One correct completion (the warm-start target)."""
    numbers: tuple[int, ...]
    """Operands (arithmetic) or offered numbers (countdown)."""
    target: int
    """The sum (arithmetic) or the countdown target."""


def is_heldout(prompt: str, fraction: float) -> bool:
    """Stable split: the prompt is held out iff ``crc32(prompt) mod 10⁶ < fraction·10⁶``."""
    return zlib.crc32(prompt.encode()) % 1_000_000 < int(round(fraction * 1_000_000))


def _arithmetic(rng: np.random.Generator, cfg: TaskConfig) -> Problem:
    hi = 10 ** cfg.digits
    a, b = (int(v) for v in rng.integers(0, hi, size=2))
    return Problem(
        kind="arithmetic",
        prompt=f"A{a}+{b}=",
        question=f"Compute {a}+{b}.",
        solution=str(a + b),
        numbers=(a, b),
        target=a + b,
    )


def _countdown(rng: np.random.Generator, cfg: TaskConfig) -> Problem:
    k = cfg.countdown_numbers
    nums = [int(v) for v in rng.integers(1, 10, size=k)]
    order = [int(i) for i in rng.permutation(k)]
    ops = [("+", "-", "*")[int(i)] for i in rng.integers(0, 3, size=k - 1)]
    expr = str(nums[order[0]])
    for op, j in zip(ops, order[1:]):
        expr += op + str(nums[j])
    value = evaluate(expr)
    assert value is not None  # built from the grammar the parser accepts
    target = value[0]
    shown = ",".join(str(n) for n in nums)
    return Problem(
        kind="countdown",
        prompt=f"C{shown}>{target}:",
        question=(
            f"Using the numbers {', '.join(map(str, nums))}, each at most once, with + - * and parentheses, "
            f"write an expression equal to {target}."
        ),
        solution=expr,
        numbers=tuple(nums),
        target=int(target),
    )


def draw_problem(rng: np.random.Generator, cfg: TaskConfig, heldout: bool) -> Problem:
    """Draw one problem of ``cfg.task`` from ``rng``, rejecting until it lies in the requested split."""
    for _ in range(10_000):
        kind = cfg.task if cfg.task != "mixed" else ("arithmetic", "countdown")[int(rng.integers(0, 2))]
        p = _arithmetic(rng, cfg) if kind == "arithmetic" else _countdown(rng, cfg)
        if is_heldout(p.prompt, cfg.heldout_fraction) == heldout:
            return p
    raise RuntimeError("could not draw a problem in the requested split; check heldout_fraction")  # pragma: no cover


def draw_problems(seed, n: int, cfg: TaskConfig, heldout: bool = False) -> list[Problem]:
    """``n`` problems from ``np.random.default_rng(seed)`` (``seed`` may be a sequence, e.g. ``[s, step]``)."""
    rng = np.random.default_rng(seed)
    return [draw_problem(rng, cfg, heldout) for _ in range(n)]


def eval_set(cfg: TaskConfig, seed: int = 12345) -> list[Problem]:
    """The fixed held-out evaluation set (same for every run of a task config: runs stay comparable)."""
    seen: dict[str, Problem] = {}
    rng = np.random.default_rng(seed)
    for _ in range(50 * cfg.n_eval):
        p = draw_problem(rng, cfg, heldout=True)
        seen.setdefault(p.prompt, p)
        if len(seen) == cfg.n_eval:
            break
    return list(seen.values())


# ----------------------------------------------------------------------------- parser and reward

_TOKEN = re.compile(r"\s*(\d+|[+\-*()])")


def _tokenize(text: str) -> list[str] | None:
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            return None
        out.append(m.group(1))
        pos = m.end()
    return out


def evaluate(text: str) -> tuple[int, tuple[int, ...]] | None:
    """Value and the literal numbers used by an expression over ``+ - *`` and parentheses.

    Returns ``None`` for anything malformed; never raises. Grammar (no unary minus)::

        expr := term (('+'|'-') term)* ; term := factor ('*' factor)* ; factor := INT | '(' expr ')'
    """
    try:
        if not isinstance(text, str) or len(text) > _MAX_EXPR_CHARS:
            return None
        toks = _tokenize(text)
        if not toks:
            return None
        used: list[int] = []
        pos = 0

        def factor(depth: int) -> int:
            nonlocal pos
            if depth > _MAX_DEPTH or pos >= len(toks):
                raise _Malformed
            t = toks[pos]
            if t == "(":
                pos += 1
                v = expr(depth + 1)
                if pos >= len(toks) or toks[pos] != ")":
                    raise _Malformed
                pos += 1
                return v
            if t.isdigit():
                if len(t) > _MAX_NUMBER_DIGITS:
                    raise _Malformed
                pos += 1
                used.append(int(t))
                return int(t)
            raise _Malformed

        def term(depth: int) -> int:
            nonlocal pos
            v = factor(depth)
            while pos < len(toks) and toks[pos] == "*":
                pos += 1
                v *= factor(depth)
            return v

        def expr(depth: int) -> int:
            nonlocal pos
            v = term(depth)
            while pos < len(toks) and toks[pos] in "+-":
                op = toks[pos]
                pos += 1
                v = v + term(depth) if op == "+" else v - term(depth)
            return v

        value = expr(0)
        if pos != len(toks):
            return None
        return int(value), tuple(used)
    except _Malformed:
        return None
    except Exception:  # belt and braces: the reward must never crash a run
        return None


class _Malformed(Exception):
    pass


_INT_FULL = re.compile(r"\s*(-?\d{1,12})\s*")
_INT_ANY = re.compile(r"-?\d{1,12}")
_EXPR_ANY = re.compile(r"[0-9+\-*()\s]*\d[0-9+\-*()\s]*")


def parse_answer(problem: Problem, text: str, lenient: bool = False):
    """The answer the completion commits to, or ``None`` if it is malformed.

    Strict (character models): the whole completion is the answer. Lenient (chat checkpoints):
    the last integer (arithmetic) or the last expression-looking span (countdown), so that a
    short preamble does not make a right answer score 0.
    """
    try:
        if not isinstance(text, str):
            return None
        if problem.kind == "arithmetic":
            m = _INT_FULL.fullmatch(text)
            if m:
                return int(m.group(1))
            if lenient:
                found = _INT_ANY.findall(text)
                return int(found[-1]) if found else None
            return None
        candidate = text
        if lenient:
            spans = [s.strip() for s in _EXPR_ANY.findall(text.split("=")[0]) if s.strip()]
            candidate = spans[-1] if spans else ""
        return evaluate(candidate)
    except Exception:
        return None


def reward(problem: Problem, text: str, lenient: bool = False) -> float:
    """Exact-match reward ``R ∈ {0, 1}``; 0 for malformed output, never an exception."""
    ans = parse_answer(problem, text, lenient)
    if ans is None:
        return 0.0
    if problem.kind == "arithmetic":
        return float(ans == problem.target)
    value, used = ans
    pool = list(problem.numbers)
    for n in used:  # each offered number at most once
        if n in pool:
            pool.remove(n)
        else:
            return 0.0
    return float(value == problem.target)
