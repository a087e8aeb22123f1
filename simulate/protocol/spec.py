"""The protocol as a frozen object read from the committed, hashed data file (docs/protocol.md).

:func:`load_protocol` reads the current ``protocol-v5.toml`` (:data:`DEFAULT_PATH`; or an earlier version,
or a user's file), validates every field — the ``[quick]`` overlay included, at every load — and
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

#: The current protocol (what ``make run``, the CLI and the figures use when no file is named).
DEFAULT_PATH = Path(__file__).with_name("protocol-v5.toml")
#: The earlier registered protocols; each stays loadable and reproduces its report under its own hash.
V1_PATH = Path(__file__).with_name("protocol.toml")
V2_PATH = Path(__file__).with_name("protocol-v2.toml")
V3_PATH = Path(__file__).with_name("protocol-v3.toml")
V4_PATH = Path(__file__).with_name("protocol-v4.toml")
V5_PATH = Path(__file__).with_name("protocol-v5.toml")
#: Protocol v6 (confirmatory, instances drawn by seed; issue 53): the answer table and its headline.
V6_PATH = Path(__file__).with_name("protocol-v6.toml")
#: Seeds are NumPy ``SeedSequence`` entropy words: integers in [0, 2³²).
SEED_LIMIT = 2 ** 32
#: ``|log₂ η|`` bound of a grid edge: keeps 2^edge and its widenings finite and meaningful.
ETA_LOG2_LIMIT = 64.0
#: Upper bounds of the size fields: far above any registered protocol, far below what would never finish.
BUDGET_LIMIT = 2 ** 24
WIDEN_LIMIT = 32
STEPS_LIMIT = 10 ** 6
#: A protocol's name names cache folders: no path separators.
NAME_RE = __import__("re").compile(r"^[A-Za-z0-9._-]{1,80}$")

__all__ = ["Protocol", "load_protocol", "check_axes", "DEFAULT_PATH", "V1_PATH", "V2_PATH", "V3_PATH", "V4_PATH",
           "V5_PATH", "V6_PATH", "QUICK_KEYS", "INSTANCE_KEYS"]


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
    eta_log2_token: tuple = ()
    # ---- version 4 (training-claims-v4, docs/protocol.md §v4; issue 32)
    zero_tol: float | None = None
    token_eta: str = "grid"
    eta_rule: str = "best"
    eta_lcb_level: float = 0.9
    heldout_margin: float = math.nan
    sensitivity_step_log2: float = math.nan
    # ---- version 5 (training-claims-v5, docs/protocol.md §v5; issue 33): per-instance learner settings
    instance_settings: dict = field(default_factory=dict, hash=False)
    # ---- version 6 (training-claims-v6, docs/protocol.md §v6; issue 53): instances drawn by seed from families
    family_root: str = ""
    families: dict = field(default_factory=dict, hash=False)
    family_budget: dict = field(default_factory=dict, hash=False)
    rivals: tuple[str, ...] = ()
    primary_arm: str = "tuned"
    quick: bool = False
    sha256: str = ""

    def __post_init__(self):
        for nm in ("instances", "estimators", "eps_estimators", "delays", "eps", "G", "tune_seeds", "eval_seeds",
                   "step_arms"):
            vals = getattr(self, nm)
            # scalars first: a table or list inside would make set() raise TypeError without naming the field
            _check(isinstance(vals, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in vals), nm,
                   f"a list of numbers or names (got {vals!r})")
            _check(len(set(vals)) == len(vals), nm, f"a list without duplicates (got {list(vals)})")
        for nm in ("delays", "G", "tune_seeds", "eval_seeds", "budget", "n_prompts", "max_widen", "version"):
            vals = getattr(self, nm)
            vals = vals if isinstance(vals, tuple) else (vals,)
            _check(all(isinstance(v, int) and not isinstance(v, bool) for v in vals), nm,
                   f"integers (got {list(vals) if len(vals) > 1 else vals[0]!r})")
        for nm in ("tune_seeds", "eval_seeds"):
            _check(all(0 <= s < SEED_LIMIT for s in getattr(self, nm)), nm, f"integers in [0, 2³²) (got {list(getattr(self, nm))})")
        for nm in ("eps", "eta_log2", "eta_log2_token"):
            _check(all(_real(v) for v in getattr(self, nm)), nm, "finite numbers")
        for nm in ("eta_log2", "eta_log2_token"):
            _check(all(abs(v) <= ETA_LOG2_LIMIT for v in getattr(self, nm)), nm,
                   f"log₂ η edges in [−{ETA_LOG2_LIMIT:g}, {ETA_LOG2_LIMIT:g}] (got {list(getattr(self, nm))})")
        for nm in ("eta_step_log2", "window_delta", "collapse_drop", "neighbour_step_log2", "margin", "alpha",
                   "failure_p0", "local_chi2", "min_fraction", "learning_gap", "power_target"):
            _check(_real(getattr(self, nm)), nm, "a finite number")
        _check(self.version in (1, 2, 3, 4, 5, 6), "version", "1, 2, 3, 4, 5 or 6")
        _check(isinstance(self.name, str) and NAME_RE.match(self.name) is not None, "name",
               "letters, digits, '.', '_' or '-' (it names cache folders; no '/'), 1 to 80 characters")
        _check(self.budget <= BUDGET_LIMIT if _int(self.budget) else True, "budget", f"an integer in [1, {BUDGET_LIMIT}]")
        _check(self.max_widen <= WIDEN_LIMIT if _int(self.max_widen) else True, "max_widen",
               f"an integer in [0, {WIDEN_LIMIT}]")
        _check("onpolicy" in self.estimators, "estimators",
               f"a list that includes 'onpolicy' (the reference of the common η, the saturation guard and "
               f"onpolicy-degrades; got {list(self.estimators)})")
        from simulate.protocol.catalog import is_registered
        from simulate.protocol.instances import INSTANCES

        self._check_families()
        unknown = [i for i in self.instances if not is_registered(i)]
        _check(not unknown, "instances", f"registered instances ({', '.join(INSTANCES)}) or family draws <family>-<seed>; "
                                         f"unknown: {unknown}")
        _check(self.window_delta >= 0, "window_delta", "a number >= 0")
        _check(self.neighbour_step_log2 > 0, "neighbour_step_log2", "a number > 0 (the next grid point up)")
        _check(self.token_eta in ("grid", "length"), "token_eta", "'grid' (own grid) or 'length' (T·η)")
        _check(self.eta_rule in ("best", "lcb"), "eta_rule", "'best' (largest tuning mean) or 'lcb' (largest lower bound)")
        _check(_real(self.eta_lcb_level) and 0.5 <= self.eta_lcb_level < 1, "eta_lcb_level", "a number in [0.5, 1)")
        _check(self.zero_tol is None or (_real(self.zero_tol) and self.zero_tol >= 0), "zero_tol",
               "a finite number >= 0 (or absent: exact equality, v1–v3)")
        if self.version >= 4:
            _check(self.zero_tol is not None, "zero_tol", "set in a version-4 protocol (a number >= 0)")
            _check(_real(self.heldout_margin) and self.heldout_margin >= 0, "heldout_margin", "a finite number >= 0")
            _check(_real(self.sensitivity_step_log2) and self.sensitivity_step_log2 < 0, "sensitivity_step_log2",
                   "a finite number < 0 (the sensitivity η is below the chosen one)")
        if self.token_eta == "grid":
            _check(len(self.eta_log2_token) == 2, "eta_log2_token", "[lo, hi] (required unless token_eta = 'length')")
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
        _check(all(self.budget % (g * self.n_prompts) == 0 for g in self.G if self.budget % g == 0), "n_prompts",
               f"a divisor of budget / G for every G (K = budget / (G·n_prompts) steps; budget {self.budget}, "
               f"G {list(self.G)}, n_prompts {self.n_prompts})")
        self._check_instance_settings(INSTANCES)
        _check(len(self.tune_seeds) >= 2 and len(self.eval_seeds) >= 2, "tune_seeds/eval_seeds", "at least 2 seeds each")
        _check(not set(self.tune_seeds) & set(self.eval_seeds), "tune_seeds/eval_seeds",
               "disjoint sets (tuning seeds must not be evaluation seeds)")
        _check(self.eta_step_log2 > 0, "eta_step_log2", "a number > 0")
        for nm in ("eta_log2", "eta_log2_token") if self.token_eta == "grid" else ("eta_log2",):
            _check(len(getattr(self, nm)) == 2, nm, "[lo, hi]")
            lo, hi = getattr(self, nm)
            _check(lo < hi and ((hi - lo) / self.eta_step_log2).is_integer(), nm,
                   "[lo, hi] with lo < hi a whole number of eta_step_log2 apart")
        _check(self.metric == "nauc", "metric", "'nauc'")
        _check(0 < self.collapse_drop <= 1, "collapse_drop", "(0, 1]")
        _check(0 < self.alpha < 0.5, "alpha", "(0, 0.5)")
        _check(0 < self.failure_p0 < 1, "failure_p0", "(0, 1)")
        _check(self.margin >= 0, "margin", "a number >= 0")
        p = self.primary
        _check(all(_int(p[k]) for k in ("G", "d")) and _real(p["eps"]), "primary", "integer G and d, a finite eps")
        _check(p["d"] in self.delays and p["G"] in self.G and p["eps"] in self.eps, "primary",
               "a cell of the grid (d in delays, G in G, eps in eps)")
        c = self.c5
        if self.version >= 6 and not c:
            return  # v6 runs no C5 cells (C5-T stays with v5)
        # types first, so that len(), int() and set() below never raise a TypeError that names no field
        _check(isinstance(c["estimators"], (list, tuple)) and all(isinstance(e, str) for e in c["estimators"]),
               "c5.estimators", "a list of estimator names")
        _check(isinstance(c["G"], (list, tuple)) and all(_int(g) and g >= 1 for g in c["G"]) and _int(c["steps"]),
               "c5.G/c5.steps", "distinct integers >= 1 (G a list of them)")
        _check(c["steps"] <= STEPS_LIMIT, "c5.steps", f"an integer in [1, {STEPS_LIMIT}] (got {c['steps']})")
        _check(_int(c["d"]), "c5.d", "an integer")
        _check(_real(c["eps"]), "c5.eps", "a finite number")
        _check(set(c["estimators"]) <= set(self.estimators) and c["d"] in self.delays and c["eps"] in self.eps
               and len(c["G"]) >= 2 and int(c["steps"]) >= 1, "c5", "estimators, d, eps from the grid, >= 2 G, steps >= 1")
        _check(all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in c["G"])
               and len(set(c["G"])) == len(c["G"]) and isinstance(c["steps"], int), "c5.G/c5.steps",
               "distinct integers >= 1")
        _check(all(_real(c[k]) and c[k] >= 0 for k in ("slope_margin", "flat_margin")), "c5.slope_margin/flat_margin",
               "finite numbers >= 0")
        _check(c.get("slope_rule", "margin") in ("margin", "theory"), "c5.slope_rule", "'margin' or 'theory'")
        _check(c.get("test_b", "run") in ("run", "retired"), "c5.test_b", "'run' or 'retired'")
        _check(_int(c["d"]), "c5.d", "an integer")
        _check("test_b_v3_se" not in c or (_real(c["test_b_v3_se"]) and c["test_b_v3_se"] > 0), "c5.test_b_v3_se",
               "a finite number > 0")
        _check(c.get("theory_regime", "comparable") in ("delay-dominated", "comparable", "variance-dominated"),
               "c5.theory_regime", "'delay-dominated', 'comparable' or 'variance-dominated'")

    def _check_instance_settings(self, registered) -> None:
        """v5: ``[instance_settings."name"]`` tables override ``n_prompts`` and ``budget`` for one registered
        instance (an instance defined by several prompts per step, e.g. ``lm-faithful-exact``)."""
        st = self.instance_settings
        _check(isinstance(st, dict), "instance_settings", "a table of per-instance tables")
        _check(not st or self.version >= 5, "instance_settings", "absent below version 5")
        for name, kw in st.items():
            where = f"instance_settings.{name}"
            _check(name in registered, where, f"a table named after a registered instance ({', '.join(registered)})")
            _check(isinstance(kw, dict) and kw and set(kw) <= set(INSTANCE_KEYS), where,
                   f"a table with keys from {sorted(INSTANCE_KEYS)} (got {kw!r})")
            for k, v in kw.items():
                _check(_int(v) and v >= 1, f"{where}.{k}", f"an integer >= 1 (got {v!r})")
            for g in self.G:
                _check(self.budget_of(name) % (g * self.prompts_of(name)) == 0, where,
                       f"budget and n_prompts with G·n_prompts dividing the budget for every G (K = budget / "
                       f"(G·n_prompts); budget {self.budget_of(name)}, n_prompts {self.prompts_of(name)}, G {g})")

    def _check_families(self) -> None:
        """v6: the instances are exactly the draws of ``family_root`` (:func:`families.check_draws`)."""
        from simulate.protocol.families import check_draws

        check_draws(self, _check, _int, BUDGET_LIMIT)

    def _family(self, instance: str) -> str | None:
        from simulate.protocol.families import is_family_name, parse_name

        return parse_name(instance)[0] if self.version >= 6 and is_family_name(instance) else None

    def prompts_of(self, instance: str) -> int:
        """Prompts (groups) per learner step on ``instance``: v6 family draws run one group per context; else its
        ``instance_settings`` entry, else ``n_prompts``."""
        if self._family(instance) is not None:
            from simulate.protocol.families import contexts
            from simulate.protocol.catalog import get_instance

            return contexts(get_instance(instance))
        return int(self.instance_settings.get(instance, {}).get("n_prompts", self.n_prompts))

    def budget_of(self, instance: str) -> int:
        """Sampled trajectories per run on ``instance``: v6 family draws ``family_budget · contexts`` (so every
        draw runs ``K = family_budget / G`` steps); else its ``instance_settings`` entry, else ``budget``."""
        fam = self._family(instance)
        if fam is not None:
            return int(self.family_budget[fam]) * self.prompts_of(instance)
        return int(self.instance_settings.get(instance, {}).get("budget", self.budget))

    def steps(self, instance: str, G: int) -> int:
        """Learner steps of a run: ``K = budget / (G·n_prompts)`` with the instance's own settings."""
        return self.budget_of(instance) // (int(G) * self.prompts_of(instance))

    def etas(self, lo: float | None = None, hi: float | None = None) -> list[float]:
        """The half-octave grid ``2^{lo}, 2^{lo+step}, …, 2^{hi}``."""
        lo = self.eta_log2[0] if lo is None else lo
        hi = self.eta_log2[1] if hi is None else hi
        n = int(round((hi - lo) / self.eta_step_log2))
        return [2.0 ** (lo + i * self.eta_step_log2) for i in range(n + 1)]

    def start_grid(self, estimator: str) -> tuple[float, float]:
        """The initial ``log₂ η`` range of ``estimator`` (token-level maps have their own)."""
        from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

        token = estimator in TOKEN_ESTIMATORS and self.token_eta == "grid"
        return self.eta_log2_token if token else self.eta_log2

    def c5_cells(self, instance: str) -> list[dict]:
        """C5's cells: ``c5.estimators × c5.G × {0, c5.d}`` at ``c5.eps``, all with ``K = c5.steps``; with test B
        retired (v4) only gmc's cell at ``d = 0`` and the middle G, whose tuned η is test A's fixed η."""
        c = self.c5
        if c.get("test_b", "run") == "retired":
            Gs = sorted(c["G"])
            return [dict(instance=instance, estimator="gmc", d=0, eps=float(c["eps"]), G=int(Gs[len(Gs) // 2]),
                         K=int(c["steps"]))]
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


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(ok: bool, name: str, valid: str) -> None:
    if not ok:
        raise ValueError(f"protocol field {name} must be {valid}")


#: Keys an ``[instance_settings."name"]`` table (v5) may set.
INSTANCE_KEYS = ("n_prompts", "budget")
#: Keys a ``[quick]`` table may override: the grid and the seeds, never the rules or the identity.
QUICK_KEYS = frozenset({"instances", "estimators", "eps_estimators", "delays", "eps", "G", "budget", "tune_seeds",
                        "eval_seeds", "eta_log2", "eta_log2_token", "c5_G"})
_TUPLES = ("instances", "estimators", "eps_estimators", "delays", "eps", "G", "tune_seeds", "eval_seeds", "eta_log2",
           "eta_log2_token", "step_arms", "rivals")
_PRIMARY_KEYS = {"eps", "G", "d"}
_C5_KEYS = {"steps", "estimators", "G", "d", "eps", "slope_margin", "flat_margin"}
_C5_OPTIONAL = {"slope_rule", "theory_regime", "test_b", "test_b_v3_se"}


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
    """Read and validate the protocol file (default: the committed ``protocol-v5.toml``).

    Every field is checked at load (one message naming the field and its valid range); unknown or
    misspelled keys are errors; ``[quick]`` may override only :data:`QUICK_KEYS`.
    """
    path = DEFAULT_PATH if path is None else Path(path)
    raw = path.read_bytes()
    data = tomllib.loads(raw.decode("utf-8"))
    quick_table = data.pop("quick", {})
    if not isinstance(quick_table, dict):
        raise ValueError(f"protocol field quick must be a table [quick] of overrides, got {quick_table!r}")
    fields = {k: f for k, f in Protocol.__dataclass_fields__.items() if k not in ("quick", "sha256")}
    unknown = set(data) - set(fields)
    if unknown:
        raise ValueError(f"protocol file {path} has unknown field(s) {sorted(unknown)}; valid: {sorted(fields)}")
    bad_quick = set(quick_table) - QUICK_KEYS
    if bad_quick:
        raise ValueError(f"protocol table [quick] may override only {sorted(QUICK_KEYS)}, not {sorted(bad_quick)}")
    _table_keys(data, "primary", _PRIMARY_KEYS)
    if data.get("version", 1) >= 6 and "c5" not in data:
        data["c5"] = {}  # v6 runs no C5 cells
    else:
        _table_keys(data, "c5", _C5_KEYS, _C5_OPTIONAL)
    kw = {}
    for k, f in fields.items():
        if k not in data:
            if f.default is MISSING and f.default_factory is MISSING:
                raise ValueError(f"protocol file {path} lacks the field {k!r}")
            continue
        v = data[k]
        if k in _TUPLES:
            if not isinstance(v, list):
                raise ValueError(f"protocol field {k} must be a list, got {v!r}")
            v = tuple(v)
        kw[k] = v
    proto = Protocol(**kw, sha256=hashlib.sha256(raw).hexdigest())
    quick_proto = _overlay_quick(proto, quick_table)  # validated at every load, not only in quick mode
    return quick_proto if quick else proto


def _overlay_quick(proto: Protocol, quick_table: dict) -> Protocol:
    """``proto`` with its ``[quick]`` table applied (validated by :class:`Protocol`)."""
    quick_table = dict(quick_table)
    for k, v in quick_table.items():
        if k in _TUPLES or k == "c5_G":
            if not isinstance(v, list):
                raise ValueError(f"protocol field quick.{k} must be a list, got {v!r}")
    c5_G = quick_table.pop("c5_G", None)
    try:
        proto = replace(proto, quick=True, **{k: tuple(v) if k in _TUPLES else v for k, v in quick_table.items()})
    except ValueError as e:
        raise ValueError(f"[quick]: {e}") from None
    if c5_G is not None:  # v3+: the quick run's C5 group sizes are named in [quick]
        _check(all(_int(g) and g >= 1 for g in c5_G) and len(set(c5_G)) == len(c5_G) and len(c5_G) >= 2, "quick.c5_G",
               f"at least two distinct integers >= 1 (got {c5_G})")
        proto = replace(proto, c5={**proto.c5, "G": list(c5_G)})
    elif proto.c5:  # v1/v2: the quick path check runs C5 on the group sizes it shares with the quick grid (at least two)
        shared = [g for g in proto.c5["G"] if g in proto.G]
        if len(shared) >= 2 and len(shared) < len(proto.c5["G"]):
            proto = replace(proto, c5={**proto.c5, "G": shared})
    return proto


from simulate.protocol.axes import check_axes  # noqa: E402  (the regime map's axes, checked against a protocol)
