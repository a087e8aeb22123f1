"""The estimator registry: one :class:`Estimator` record per map, the list of modules that define them,
and the Numba dispatch built from them.

Every map lives in one module (``asyncgrpo/estimators/maps/``) holding its NumPy, Numba and PyTorch forms
side by side and ending with ``MAPS = (Estimator(...), ...)``. This module lists those modules (one line
each, :data:`MODULES`), plus any named in the environment variable ``ASYNCGRPO_ESTIMATORS`` (a comma
list of importable module names, read when :mod:`asyncgrpo` is first imported: Numba's cache is keyed by
their sources too, so it must be set before Python starts; :func:`plugin_fingerprint` names those sources for
any other cache; each plugin's backends pass :func:`asyncgrpo.estimators.plugin_checks.check_backends` before
they register), and builds:

* the per-name records (:func:`entry`, :func:`names`) the NumPy/torch wrappers dispatch on;
* the Numba dispatch :func:`dispatch` — a generated module with ``log_weights_nb(code, ell, eps, out)``,
  ``token_coefficients_nb(code, …)`` and ``estimator_flags_nb(code)``, one ``if code == …`` branch per
  registered kernel. It is written once per registry content (the file name is a hash of its source)
  under Numba's cache directory, so ``@njit(cache=True)`` works and a changed registry never reuses a
  stale kernel. Kernels outside the registry (the Monte Carlo and training learners) never name a code:
  they call the dispatch and read the flags.

Kernel signatures (no validation inside; the public wrappers validate once):

* trajectory level: ``numba(ell, eps, out)`` writes ``log w_i`` of one group (``ell`` float64 ``(G,)``);
  ``numpy(ell, eps)`` returns ``log w`` over the last axis of ``(..., G)``; ``torch(ell, eps, mask)`` returns
  ``log w`` of ``[n_groups, G]`` (padded entries are masked by the caller).
* token level: ``numba(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out)`` writes
  ``c_{i,t} = k_{i,t}/T_i`` (0 off the mask); ``numpy(ell, mask, adv, T_i, p)`` and ``torch(…)`` return
  ``k_{i,t}`` (``ell`` is 0 off the mask, ``T_i`` ``[N, 1]``, ``p`` a :class:`TokenParams`).
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.util
import math
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from asyncgrpo.plugins import ENV_VAR, plugin_fingerprint, plugin_modules

#: The modules that define the built-in estimators, in registry order (one line per module).
MODULES: tuple[str, ...] = (
    "asyncgrpo.estimators.maps.onpolicy",
    "asyncgrpo.estimators.maps.importance",
    "asyncgrpo.estimators.maps.truncation",
    "asyncgrpo.estimators.maps.gmc",
    "asyncgrpo.estimators.maps.ppo_clip",
    "asyncgrpo.estimators.maps.cispo",
    "asyncgrpo.estimators.maps.m2po",
    "asyncgrpo.estimators.maps.verl_rollout_corr",
    "asyncgrpo.estimators.maps.trl_opsm",
    "asyncgrpo.estimators.maps.sapo",
    "asyncgrpo.estimators.maps.gpg",
    "asyncgrpo.estimators.maps.luspo",
)
LEVELS = ("trajectory", "token")
#: What the learner's clip fraction compares a token's coefficient with (token level): nothing (NaN), the
#: token ratio ``r_{i,t}``, the sequence ratio ``exp(ℓ_i/T)``, or 1 (masks: the fraction of dropped tokens).
CLIP_RATIOS = ("none", "token", "sequence", "unit")
#: Codes handed to extra modules' estimators that do not fix one (trajectory level first free from 100,
#: token level from 200): disjoint from the built-ins.
_PLUGIN_BASE = {"trajectory": 100, "token": 200}
#: Codes are literals in the generated Numba dispatch, compared with an int64 argument: below 2**31.
MAX_CODE = 2**31


class TokenParams(NamedTuple):
    """Parameters of the token-level maps (each map reads the ones it needs)."""

    eps_low: float
    eps_high: float
    tau_m2: float
    log_c: float  # log of the dual clip c (inf: off)
    cispo_clamp: str
    cispo_mode: int  # index of cispo_clamp in token_level.CISPO_CLAMPS


@dataclass(frozen=True)
class Estimator:
    """One registered estimator: its name, level, the three backends and the attributes kernels read.

    ``in_class``: the weights lie in ``𝒲_ε`` for every ``ρ`` (THEORY §3). ``capped``: the torch backend
    enforces the group mean ``≤ 1+ε`` after rounding (maps whose mean is capped at ``1+ε``).
    ``reports_clip`` (trajectory): the learner reports the fraction of trajectories with ``w_i < ρ_i``.
    ``clip_ratio`` (token): see :data:`CLIP_RATIOS`. ``dual_clip`` / ``cispo_clamp``: the map takes
    ``clip_ratio_c`` / ``cispo_clamp``. ``rejects``: a zero weight is a rejection that removes the token from
    the aggregation's mask (verl's rejection sampling rewrites ``response_mask``), so normalisers count
    kept tokens only. ``peer``: whose method this is; ``correction``: one of the peers' off-policy
    corrections (its ``pg_loss`` is the peer's logged objective at ``π_old = π_θ``, ``−A·k``);
    ``objective``: optional ``fn(ell, mask, adv, logp) -> [N, T]`` per-token objective the peer logs (torch,
    float64), else ``−A·k·log π``; ``uses_eps``: whether ε changes the map; ``defaults``: the peer's option
    names and the values used. ``metrics``: optional ``fn(ell, mask, adv, rows) -> dict`` of extra metrics
    (torch, float64) for :func:`asyncgrpo.estimators.loss_metrics.loss_metrics`. ``torch_tokens`` (trajectory
    level): optional ``fn(tok_ell [n, G, T], eps, tok_mask [n, G, T]) -> log w [n, G]`` for a peer whose weight
    reads each token's log-ratio, not only ``ℓ_i = Σ_t ℓ_{i,t}`` (verl clamps each token to ±20 before summing);
    the torch loss uses it where it has the tokens, the NumPy/Numba learners (trajectory ratios only) do not.
    """

    name: str
    level: str
    numpy: Callable
    numba: Any
    torch: Callable
    code: int | None = None
    formula: str = ""
    doc: str = ""
    in_class: bool = False
    capped: bool = False
    reports_clip: bool = False
    clip_ratio: str = "none"
    dual_clip: bool = False
    cispo_clamp: bool = False
    rejects: bool = False
    peer: str | None = None
    correction: bool = False
    objective: Callable | None = None
    uses_eps: bool = True
    defaults: dict = field(default_factory=dict)
    metrics: Callable | None = None
    torch_tokens: Callable | None = None

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Estimator name must be an identifier-like string, got {self.name!r}")
        if self.level not in LEVELS:
            raise ValueError(f"Estimator {self.name!r}: level must be one of {LEVELS}, got {self.level!r}")
        if self.clip_ratio not in CLIP_RATIOS:
            raise ValueError(f"Estimator {self.name!r}: clip_ratio must be one of {CLIP_RATIOS}, got {self.clip_ratio!r}")
        if self.code is not None and (isinstance(self.code, bool) or not isinstance(self.code, int)
                                      or not 0 <= self.code < MAX_CODE):
            raise ValueError(f"Estimator {self.name!r}: code must be an int in [0, 2**31) or None, got {self.code!r}")
        for backend in ("numpy", "torch"):
            if not callable(getattr(self, backend)):
                raise ValueError(f"Estimator {self.name!r}: {backend} must be callable")
        if self.torch_tokens is not None and (self.level != "trajectory" or not callable(self.torch_tokens)):
            raise ValueError(f"Estimator {self.name!r}: torch_tokens must be callable, on a trajectory-level map")
        if not hasattr(self.numba, "py_func"):
            raise ValueError(f"Estimator {self.name!r}: numba must be an @njit function defined at module level")


_ENTRIES: dict[str, Estimator] | None = None


def _load() -> dict[str, Estimator]:
    global _ENTRIES
    if _ENTRIES is not None:
        return _ENTRIES
    out: dict[str, Estimator] = {}
    used: set[int] = set()
    pending = []
    plugins = plugin_modules()
    for mod_name in MODULES + plugins:
        try:
            mod = importlib.import_module(mod_name)
        except SystemExit as exc:
            # a plugin ending the process at import would end every entry point with its status and no
            # word: say which module did it, once, and exit 2 (a usage error)
            print(f"asyncgrpo: error: estimator module {mod_name!r} (from ${ENV_VAR}) called sys.exit({exc.code!r}) "
                  f"while being imported", file=sys.stderr)
            raise SystemExit(2) from None
        except Exception as exc:  # noqa: BLE001 - name the module and the variable that listed it
            raise ImportError(f"estimator module {mod_name!r} (from {ENV_VAR} or registry.MODULES) cannot be "
                              f"imported: {type(exc).__name__}: {exc}") from exc
        maps = getattr(mod, "MAPS", None)
        if not isinstance(maps, tuple) or not all(isinstance(e, Estimator) for e in maps) or not maps:
            raise ValueError(f"estimator module {mod_name!r} must define MAPS, a non-empty tuple of Estimator")
        for e in maps:
            if e.name in out:
                raise ValueError(f"estimator {e.name!r} from {mod_name!r} is already registered")
            fn = e.numba.py_func
            if getattr(sys.modules.get(fn.__module__), fn.__name__, None) is not e.numba:
                raise ValueError(f"estimator {e.name!r}: its numba kernel must be a module-level @njit function "
                                 f"(found {fn.__module__}.{fn.__qualname__})")
            if e.code is not None:
                if e.code in used:
                    raise ValueError(f"estimator {e.name!r}: code {e.code} is already used")
                used.add(e.code)
            out[e.name] = e
            pending.append((e, mod_name))
    for e, _ in pending:
        if e.code is None:
            c = _PLUGIN_BASE[e.level]
            while c in used:
                c += 1
            used.add(c)
            out[e.name] = _replace_code(e, c)
    from asyncgrpo.estimators.plugin_checks import check_backends

    for e, mod_name in pending:
        if mod_name in plugins:  # the built-ins are checked by the test suite, not at every import
            check_backends(out[e.name], mod_name, TokenParams(0.2, 0.28, 0.04, math.inf, "upper", 0))
    _ENTRIES = out
    return out


def _replace_code(e: Estimator, code: int) -> Estimator:
    from dataclasses import replace

    return replace(e, code=code)


def entries() -> dict[str, Estimator]:
    """Every registered estimator by name, in registry order."""
    return dict(_load())


def names(level: str | None = None) -> tuple[str, ...]:
    """Registered names (of one ``level`` when given)."""
    return tuple(n for n, e in _load().items() if level is None or e.level == level)


def entry(name: str, level: str | None = None) -> Estimator:
    """The record of ``name``; ``ValueError`` naming the known ones if absent (or of another ``level``)."""
    e = _load().get(name)
    if e is None or (level is not None and e.level != level):
        known = ", ".join(names(level))
        what = "estimator" if level is None else f"{level}-level estimator"
        raise ValueError(f"unknown {what} {name!r}; known: {known}")
    return e


def code(name: str) -> int:
    """Integer id of ``name`` for the Numba kernels."""
    return entry(name).code


# --------------------------------------------------------------------------- Numba dispatch
_DISPATCH = None


def _kernel_ref(e: Estimator) -> tuple[str, str]:
    fn = e.numba.py_func
    return fn.__module__, fn.__name__


def dispatch_source() -> str:
    """Source of the generated dispatch module (a function of the registry's content only)."""
    ents = list(_load().values())
    lines = [
        '"""Generated by asyncgrpo.estimators.registry.dispatch_source: the Numba dispatch over the registered',
        'estimators. Do not edit; it is rewritten (under a new name) whenever the registry changes."""',
        "import math", "", "import numpy as np", "from numba import njit", "",
    ]
    for e in ents:
        mod, fn = _kernel_ref(e)
        lines.append(f"from {mod} import {fn} as _k{e.code}  # {e.name}")
    lines += ["", "",
              "@njit(cache=True)",
              "def _renormalise_rows_nb(out, mask):",
              "    # a rejecting map's kept rows carry the whole batch: c *= N/N_kept (seq-mean-token-mean over the",
              "    # kept rows, as verl's rejection rewrites response_mask)",
              "    N, T = out.shape",
              "    kept = 0",
              "    for i in range(N):",
              "        for t in range(T):",
              "            if mask[i, t] and out[i, t] != 0.0:",
              "                kept += 1",
              "                break",
              "    if kept > 0 and kept < N:",
              "        scale = N / kept",
              "        for i in range(N):",
              "            for t in range(T):",
              "                out[i, t] = out[i, t] * scale",
              "", "",
              "@njit(cache=True)",
              "def log_weights_nb(code, ell, eps, out):",
              '    """Write ``log w_i`` of trajectory-level estimator ``code`` into ``out``; returns ``out``."""']
    kw = "if"
    for e in ents:
        if e.level == "trajectory":
            lines += [f"    {kw} code == {e.code}:  # {e.name}", f"        _k{e.code}(ell, eps, out)"]
            kw = "elif"
    lines += ["    else:" if kw == "elif" else "    if True:", '        raise ValueError("unknown estimator code")',
              "    return out", "", "",
              "@njit(cache=True)",
              "def token_coefficients_nb(code, tok_ell, mask, adv, eps_low, eps_high, tau_m2, out, "
              "log_clip_c=math.inf, cispo_mode=0):",
              '    """Write ``c_{i,t} = k_{i,t}/T_i`` of token-level estimator ``code`` into ``out``; returns ``out``."""']
    kw = "if"
    for e in ents:
        if e.level == "token":
            lines += [f"    {kw} code == {e.code}:  # {e.name}",
                      f"        _k{e.code}(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out)"]
            if e.rejects:
                lines.append("        _renormalise_rows_nb(out, mask)")
            kw = "elif"
    lines += ["    else:" if kw == "elif" else "    if True:",
              '        raise ValueError("unknown token-level estimator code")', "    return out", "", "",
              "@njit(cache=True)",
              "def estimator_flags_nb(code):",
              '    """``(token_level, clip_ratio, reports_clip)`` of ``code``: ``clip_ratio`` indexes registry.CLIP_RATIOS."""']
    kw = "if"
    for e in ents:
        lines += [f"    {kw} code == {e.code}:  # {e.name}",
                  f"        return {e.level == 'token'}, {CLIP_RATIOS.index(e.clip_ratio)}, {e.reports_clip}"]
        kw = "elif"
    lines += ['    raise ValueError("unknown estimator code")', ""]
    return "\n".join(lines)


def _dispatch_dir() -> Path:
    import numba

    base = numba.config.CACHE_DIR or os.path.join(tempfile.gettempdir(), "asyncgrpo-numba")
    return Path(base) / "dispatch"


def dispatch():
    """The generated dispatch module (built and imported on first use)."""
    global _DISPATCH
    if _DISPATCH is not None:
        return _DISPATCH
    src = dispatch_source()
    digest = hashlib.sha256(src.encode()).hexdigest()[:16]
    mod_name = f"asyncgrpo_dispatch_{digest}"
    folder = _dispatch_dir()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{mod_name}.py"
    # content-addressed and never rewritten once present: Numba's cache is keyed by the file's stamp, so
    # rewriting it would force a recompile in every process
    if not path.exists() or path.read_text() != src:
        tmp = folder / f".{mod_name}.{os.getpid()}.tmp"
        tmp.write_text(src)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(mod_name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)
    _DISPATCH = mod
    return mod


__all__ = ["MODULES", "ENV_VAR", "LEVELS", "CLIP_RATIOS", "Estimator", "TokenParams", "entries", "names", "entry",
           "code", "plugin_modules", "plugin_fingerprint", "dispatch", "dispatch_source", "MAX_CODE"]
