"""The protocol as a frozen object read from the committed, hashed data file (docs/protocol.md).

:func:`load_protocol` reads ``protocol.toml`` (or a user's file), validates every field and
returns a :class:`Protocol`; ``quick=True`` overlays the file's ``[quick]`` table (fewer seeds, a
smaller grid, the same rules). ``Protocol.sha256`` is the hash of the file's bytes, printed in the
report, so a reader can tell which pre-registered rules produced a verdict.
"""
from __future__ import annotations

import hashlib
import math
import tomllib
from dataclasses import MISSING, dataclass, field, replace
from pathlib import Path

from simulate.training.config import REGISTERED_ESTIMATORS

DEFAULT_PATH = Path(__file__).with_name("protocol-v3.toml")
#: The earlier registered protocols; each stays loadable and reproduces its report under its own hash.
V1_PATH = Path(__file__).with_name("protocol.toml")
V2_PATH = Path(__file__).with_name("protocol-v2.toml")

__all__ = ["Protocol", "load_protocol", "DEFAULT_PATH", "V1_PATH", "V2_PATH", "QUICK_KEYS"]


@dataclass(frozen=True)
class Protocol:
    """Every choice of the training-claims protocol (field docs in ``protocol.toml``)."""

    name: str
    registered: str
    instances: tuple[str, ...]
    estimators: tuple[str, ...]
    eps_estimators: tuple[str, ...]
    delays: tuple[int, ...]
    eps: tuple[float, ...]
    G: tuple[int, ...]
    budget: int
    n_prompts: int
    tune_seeds: tuple[int, ...]
    eval_seeds: tuple[int, ...]
    eta_log2: tuple[float, float]
    eta_log2_token: tuple[float, float]
    eta_step_log2: float
    max_widen: int
    window_delta: float
    metric: str
    collapse_drop: float
    neighbour_step_log2: float
    margin: float
    alpha: float
    failure_p0: float
    local_chi2: float
    min_fraction: float
    primary: dict = field(hash=False)
    c5: dict = field(hash=False)
    # ---- version 2 (training-claims-v2, docs/protocol.md §v2); absent from a v1 file, whose rules stay v1's
    version: int = 1
    lockin_nJ: float = math.nan
    lockin_grad_rel: float = math.nan
    learning_gap: float = 0.9
    saturation_nauc: float = math.inf
    saturation_zero: float = math.inf
    step_arms: tuple[str, ...] = ("tuned",)
    power_target: float = 0.8
    # ---- version 3 (training-claims-v3, docs/protocol.md §v3)
    normalise: str = "path"
    rate_premise_d0: bool = False
    quick: bool = False
    sha256: str = ""

    def __post_init__(self):
        for nm in ("instances", "estimators", "eps_estimators", "delays", "eps", "G", "tune_seeds", "eval_seeds",
                   "step_arms"):
            vals = getattr(self, nm)
            _check(len(set(vals)) == len(vals), nm, f"a list without duplicates (got {list(vals)})")
        for nm in ("delays", "G", "tune_seeds", "eval_seeds", "budget", "n_prompts", "max_widen", "version"):
            vals = getattr(self, nm)
            vals = vals if isinstance(vals, tuple) else (vals,)
            _check(all(isinstance(v, int) and not isinstance(v, bool) for v in vals), nm,
                   f"integers (got {list(vals) if len(vals) > 1 else vals[0]!r})")
        for nm in ("eps", "eta_log2", "eta_log2_token"):
            _check(all(_real(v) for v in getattr(self, nm)), nm, "finite numbers")
        for nm in ("eta_step_log2", "window_delta", "collapse_drop", "neighbour_step_log2", "margin", "alpha",
                   "failure_p0", "local_chi2", "min_fraction", "learning_gap", "power_target"):
            _check(_real(getattr(self, nm)), nm, "a finite number")
        _check(self.version in (1, 2, 3), "version", "1, 2 or 3")
        _check(self.normalise in ("path", "class"), "normalise", "'path' (J*) or 'class' (J_class)")
        _check(isinstance(self.rate_premise_d0, bool), "rate_premise_d0", "true or false")
        _check(self.budget >= 1, "budget", "an integer >= 1")
        _check(self.n_prompts >= 1, "n_prompts", "an integer >= 1")
        _check(self.max_widen >= 0, "max_widen", "an integer >= 0")
        _check(self.local_chi2 > 0, "local_chi2", "a number > 0")
        _check(0 < self.min_fraction <= 1, "min_fraction", "a number in (0, 1]")
        _check(0 < self.learning_gap <= 1, "learning_gap", "a number in (0, 1]")
        _check(0 < self.power_target < 1, "power_target", "a number in (0, 1)")
        _check(set(self.step_arms) <= {"tuned", "common"} and "tuned" in self.step_arms, "step_arms",
               "a subset of ['tuned', 'common'] that includes 'tuned'")
        if self.version >= 2:
            _check(_real(self.lockin_nJ) and 0 < self.lockin_nJ <= 1, "lockin_nJ", "a number in (0, 1]")
            _check(_real(self.lockin_grad_rel) and self.lockin_grad_rel > 0, "lockin_grad_rel", "a number > 0")
            _check(_real(self.saturation_nauc) and 0 < self.saturation_nauc <= 1, "saturation_nauc", "a number in (0, 1]")
            _check(_real(self.saturation_zero) and 0 < self.saturation_zero <= 1, "saturation_zero", "a number in (0, 1]")
        _check(set(self.estimators) <= set(REGISTERED_ESTIMATORS), "estimators",
               f"a subset of the registered estimators {', '.join(REGISTERED_ESTIMATORS)}")
        _check(set(self.eps_estimators) <= set(self.estimators), "eps_estimators", "a subset of estimators")
        _check(len(self.delays) >= 2 and min(self.delays) == 0 and all(int(d) == d >= 0 for d in self.delays),
               "delays", "at least two integers >= 0 including 0")
        _check(all(0 < e < math.inf for e in self.eps), "eps", "numbers in (0, inf)")
        _check(all(int(g) == g >= 1 for g in self.G), "G", "integers >= 1")
        _check(all(self.budget % g == 0 for g in self.G), "budget",
               "a multiple of every G (K = budget / G steps)")
        _check(len(self.tune_seeds) >= 2 and len(self.eval_seeds) >= 2, "tune_seeds/eval_seeds", "at least 2 seeds each")
        _check(not set(self.tune_seeds) & set(self.eval_seeds), "tune_seeds/eval_seeds",
               "disjoint sets (tuning seeds must not be evaluation seeds)")
        _check(self.eta_step_log2 > 0, "eta_step_log2", "a number > 0")
        for nm in ("eta_log2", "eta_log2_token"):
            _check(len(getattr(self, nm)) == 2, nm, "[lo, hi]")
            lo, hi = getattr(self, nm)
            _check(lo < hi and ((hi - lo) / self.eta_step_log2).is_integer(), nm,
                   "[lo, hi] with lo < hi a whole number of eta_step_log2 apart")
        _check(self.metric == "nauc", "metric", "'nauc'")
        _check(0 < self.collapse_drop <= 1, "collapse_drop", "(0, 1]")
        _check(0 < self.alpha < 0.5, "alpha", "(0, 0.5)")
        _check(0 < self.failure_p0 < 1, "failure_p0", "(0, 1)")
        _check(self.margin >= 0 and self.window_delta >= 0, "margin", "a number >= 0")
        p = self.primary
        _check(p["d"] in self.delays and p["G"] in self.G and p["eps"] in self.eps, "primary",
               "a cell of the grid (d in delays, G in G, eps in eps)")
        c = self.c5
        _check(set(c["estimators"]) <= set(self.estimators) and c["d"] in self.delays and c["eps"] in self.eps
               and len(c["G"]) >= 2 and int(c["steps"]) >= 1, "c5", "estimators, d, eps from the grid, >= 2 G, steps >= 1")
        _check(all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in c["G"])
               and len(set(c["G"])) == len(c["G"]) and isinstance(c["steps"], int), "c5.G/c5.steps",
               "distinct integers >= 1")
        _check(all(_real(c[k]) and c[k] >= 0 for k in ("slope_margin", "flat_margin")), "c5.slope_margin/flat_margin",
               "finite numbers >= 0")
        _check(c.get("slope_rule", "margin") in ("margin", "theory"), "c5.slope_rule", "'margin' or 'theory'")
        _check(c.get("theory_regime", "comparable") in ("delay-dominated", "comparable", "variance-dominated"),
               "c5.theory_regime", "'delay-dominated', 'comparable' or 'variance-dominated'")

    def etas(self, lo: float | None = None, hi: float | None = None) -> list[float]:
        """The half-octave grid ``2^{lo}, 2^{lo+step}, …, 2^{hi}``."""
        lo = self.eta_log2[0] if lo is None else lo
        hi = self.eta_log2[1] if hi is None else hi
        n = int(round((hi - lo) / self.eta_step_log2))
        return [2.0 ** (lo + i * self.eta_step_log2) for i in range(n + 1)]

    def start_grid(self, estimator: str) -> tuple[float, float]:
        """The initial ``log₂ η`` range of ``estimator`` (token-level maps have their own)."""
        from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

        return self.eta_log2_token if estimator in TOKEN_ESTIMATORS else self.eta_log2

    def c5_cells(self, instance: str) -> list[dict]:
        """C5's cells: ``c5.estimators × c5.G × {0, c5.d}`` at ``c5.eps``, all with ``K = c5.steps``."""
        c = self.c5
        return [dict(instance=instance, estimator=e, d=int(d), eps=float(c["eps"]), G=int(G), K=int(c["steps"]))
                for e in c["estimators"] for G in c["G"] for d in (0, int(c["d"]))]

    def cells(self, instance: str) -> list[dict]:
        """Every cell ``(instance, estimator, d, eps, G)`` of the grid; ε is kept only for
        ``eps_estimators`` (the others run once per (d, G), at ε = the primary ε, which they ignore)."""
        out = []
        for e in self.estimators:
            epss = self.eps if e in self.eps_estimators else (self.primary["eps"],)
            for d in self.delays:
                for G in self.G:
                    for eps in epss:
                        out.append(dict(instance=instance, estimator=e, d=int(d), eps=float(eps), G=int(G)))
        return out

    @property
    def label(self) -> str:
        """``name@sha256[:12]`` (``+quick``)."""
        return f"{self.name}@{self.sha256[:12]}" + ("+quick" if self.quick else "")


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(ok: bool, name: str, valid: str) -> None:
    if not ok:
        raise ValueError(f"protocol field {name} must be {valid}")


#: Keys a ``[quick]`` table may override: the grid and the seeds, never the rules or the identity.
QUICK_KEYS = frozenset({"instances", "estimators", "eps_estimators", "delays", "eps", "G", "budget", "tune_seeds",
                        "eval_seeds", "eta_log2", "eta_log2_token", "c5_G"})
_TUPLES = ("instances", "estimators", "eps_estimators", "delays", "eps", "G", "tune_seeds", "eval_seeds", "eta_log2",
           "eta_log2_token", "step_arms")
_PRIMARY_KEYS = {"eps", "G", "d"}
_C5_KEYS = {"steps", "estimators", "G", "d", "eps", "slope_margin", "flat_margin"}
_C5_OPTIONAL = {"slope_rule", "theory_regime"}


def _table_keys(data: dict, name: str, required: set, optional: set = frozenset()) -> None:
    if not isinstance(data.get(name), dict):
        raise ValueError(f"protocol field {name} must be a table [{name}] with keys {sorted(required)}")
    keys = set(data[name])
    missing, unknown = required - keys, keys - required - optional
    if missing:
        raise ValueError(f"protocol table [{name}] lacks the key(s) {sorted(missing)}")
    if unknown:
        raise ValueError(f"protocol table [{name}] has unknown key(s) {sorted(unknown)}; valid: {sorted(required | optional)}")


def load_protocol(path: str | Path | None = None, quick: bool = False) -> Protocol:
    """Read and validate the protocol file (default: the committed ``protocol-v3.toml``).

    Every field is checked at load (one message naming the field and its valid range); unknown or
    misspelled keys are errors; ``[quick]`` may override only :data:`QUICK_KEYS`.
    """
    path = DEFAULT_PATH if path is None else Path(path)
    raw = path.read_bytes()
    data = tomllib.loads(raw.decode("utf-8"))
    quick_table = data.pop("quick", {})
    fields = {k: f for k, f in Protocol.__dataclass_fields__.items() if k not in ("quick", "sha256")}
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"protocol file {path} has unknown field(s) {sorted(unknown)}; valid: {sorted(fields)}")
    bad_quick = set(quick_table) - QUICK_KEYS
    if bad_quick:
        raise ValueError(f"protocol table [quick] may override only {sorted(QUICK_KEYS)}, not {sorted(bad_quick)}")
    _table_keys(data, "primary", _PRIMARY_KEYS)
    _table_keys(data, "c5", _C5_KEYS, _C5_OPTIONAL)
    kw = {}
    for k, f in fields.items():
        if k not in data:
            if f.default is MISSING:
                raise ValueError(f"protocol file {path} lacks the field {k!r}")
            continue
        v = data[k]
        if k in _TUPLES:
            if not isinstance(v, list):
                raise ValueError(f"protocol field {k} must be a list, got {v!r}")
            v = tuple(v)
        kw[k] = v
    proto = Protocol(**kw, sha256=hashlib.sha256(raw).hexdigest())
    if quick:
        c5_G = quick_table.pop("c5_G", None)
        proto = replace(proto, quick=True, **{k: tuple(v) if k in _TUPLES else v for k, v in quick_table.items()})
        if c5_G is not None:  # v3: the quick run's C5 group sizes are named in [quick]
            proto = replace(proto, c5={**proto.c5, "G": list(c5_G)})
        else:  # v1/v2: the quick path check runs C5 on the group sizes it shares with the quick grid (at least two)
            shared = [g for g in proto.c5["G"] if g in proto.G]
            if len(shared) >= 2 and len(shared) < len(proto.c5["G"]):
                proto = replace(proto, c5={**proto.c5, "G": shared})
    return proto
