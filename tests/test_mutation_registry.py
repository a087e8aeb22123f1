"""The registry's refusals and its plugin codes (issue 39), on plugin modules written to a temporary folder.

Specification (asyncgrpo/estimators/registry.py docstrings, docs/estimators.md "Add an estimator in one
file"): every registered name and every integer code is unique, so a plugin that reuses a name or a code is
refused with a ValueError naming it; an estimator that fixes no code gets the first free one from 100
(trajectory level) or 200 (token level), in the order the modules and their ``MAPS`` list them.

The registry is read once per process (at the first import of :mod:`asyncgrpo`), so each test here empties its
cache (``registry._ENTRIES``), names its plugin modules in ``$ASYNCGRPO_ESTIMATORS`` and reads the records
again; ``monkeypatch`` puts the process's registry back afterwards. Nothing here builds the Numba dispatch.
"""
from __future__ import annotations

import sys
import textwrap

import pytest

from asyncgrpo.estimators import registry
from _plugin_source import SOUND_TRAJECTORY

HEADER = SOUND_TRAJECTORY + '''

def k(ell, mask, adv, T_i, p):
    return np.ones_like(ell)


@njit(cache=True)
def k_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    for i in range(out.shape[0]):  # the Numba contract: c = k/T_i on real tokens, 0 off them
        Ti = 0
        for t in range(out.shape[1]):
            Ti += mask[i, t]
        for t in range(out.shape[1]):
            out[i, t] = 1.0 / Ti if mask[i, t] else 0.0


def k_torch(ell, mask, adv, T_i, p):
    import torch
    return torch.ones_like(ell)


def traj(name, code=None):
    return Estimator(name, "trajectory", numpy=lw, numba=lw_nb, torch=lw_torch, code=code)


def tok(name, code=None):
    return Estimator(name, "token", numpy=k, numba=k_nb, torch=k_torch, code=code)
'''


@pytest.fixture
def load_plugins(monkeypatch, tmp_path):
    """``load(mod_name=maps_expr, ...)``: write one module per keyword (its ``MAPS = <maps_expr>``), name them in
    ``$ASYNCGRPO_ESTIMATORS`` in that order and return the registry read afresh."""
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def load(**mods):
        for name, maps in mods.items():
            mod = f"t39_{name}"
            body = maps if "MAPS = " in maps else f"MAPS = {maps}"  # a whole module tail, or MAPS's value
            (tmp_path / f"{mod}.py").write_text(HEADER + textwrap.dedent(f"\n{body}\n"))
            written.append(mod)
        monkeypatch.setenv(registry.ENV_VAR, ",".join(f"t39_{n}" for n in mods))
        monkeypatch.setattr(registry, "_ENTRIES", None)
        return registry.entries()

    yield load
    for mod in written:
        sys.modules.pop(mod, None)


def test_first_plugin_codes_are_100_and_200_then_the_next_free(load_plugins):
    ents = load_plugins(a="(traj('p39_t1'), tok('p39_k1'), traj('p39_t2'))", b="(tok('p39_k2'),)")
    assert ents["p39_t1"].code == 100 and ents["p39_t2"].code == 101
    assert ents["p39_k1"].code == 200 and ents["p39_k2"].code == 201
    # the built-ins keep their fixed codes and come first, then the plugins in module and MAPS order
    assert list(ents)[-4:] == ["p39_t1", "p39_k1", "p39_t2", "p39_k2"]
    builtin = {n: e.code for n, e in ents.items() if not n.startswith("p39_")}
    assert all(c < 100 for c in builtin.values()) and len(set(builtin.values())) == len(builtin)


def test_a_plugin_code_fixed_at_the_base_moves_the_free_ones_up(load_plugins):
    ents = load_plugins(a="(traj('p39_free'), traj('p39_fixed', code=100), tok('p39_tok', code=200), tok('p39_k'))")
    assert ents["p39_fixed"].code == 100 and ents["p39_free"].code == 101
    assert ents["p39_tok"].code == 200 and ents["p39_k"].code == 201
    codes = [e.code for e in ents.values()]
    assert len(set(codes)) == len(codes)


def test_a_plugin_reusing_a_builtin_name_is_refused(load_plugins):
    with pytest.raises(ValueError, match="'tis'.*already registered"):
        load_plugins(a="(traj('tis'),)")


def test_two_plugins_with_one_name_are_refused(load_plugins):
    with pytest.raises(ValueError, match="'p39_same'.*already registered"):
        load_plugins(a="(traj('p39_same'),)", b="(tok('p39_same'),)")


def test_a_plugin_reusing_a_builtin_code_is_refused(load_plugins):
    used = registry.code("gmc")
    with pytest.raises(ValueError, match=rf"'p39_clash'.*code {used}\b.*already used"):
        load_plugins(a=f"(traj('p39_clash', code={used}),)")


def test_two_plugins_with_one_code_are_refused(load_plugins):
    with pytest.raises(ValueError, match=r"'p39_second'.*code 150\b.*already used"):
        load_plugins(a="(traj('p39_first', code=150),)", b="(tok('p39_second', code=150),)")


def test_a_free_plugin_code_is_never_a_fixed_one(load_plugins):
    """"First free" is free of every fixed code, whichever module fixes it: an earlier estimator without a code
    does not take 100 from a later module that fixes 100 (both load; the free one gets 101)."""
    ents = load_plugins(a="(traj('p39_early'),)", b="(traj('p39_late', code=100),)")
    assert ents["p39_late"].code == 100 and ents["p39_early"].code == 101


@pytest.mark.parametrize("maps", ["()", "[traj('p39_list')]", "(traj('p39_ok'), 'not an Estimator')"])
def test_a_module_without_a_non_empty_tuple_of_estimators_is_refused(load_plugins, maps):
    with pytest.raises(ValueError, match="t39_a.*MAPS"):
        load_plugins(a=maps)


def test_a_module_that_cannot_be_imported_is_named(load_plugins):
    with pytest.raises(ImportError, match="t39_a.*ZeroDivisionError"):
        load_plugins(a="(traj('p39_x'),)\n1 / 0")


def test_a_kernel_not_defined_at_module_level_is_refused(load_plugins):
    maps = "(Estimator('p39_inner', 'trajectory', numpy=lw, numba=njit(lambda ell, eps, out: out), torch=lw_torch),)"
    with pytest.raises(ValueError, match="'p39_inner'.*module-level"):
        load_plugins(a=maps)


@pytest.mark.parametrize("code", [-1, -100, True, 1.0, "3"])
def test_an_estimator_code_must_be_a_non_negative_int(code):
    tis = registry.entry("tis")
    with pytest.raises(ValueError, match="code must be an int"):
        registry.Estimator("p39_code", "trajectory", numpy=tis.numpy, numba=tis.numba, torch=tis.torch, code=code)
    assert registry.Estimator("p39_code", "trajectory", numpy=tis.numpy, numba=tis.numba, torch=tis.torch,
                              code=0).code == 0


def test_the_dispatch_is_content_addressed_under_numbas_cache_directory():
    """The generated dispatch module is named by a hash of its source (16 hex digits of SHA-256) and written
    under Numba's cache directory (registry docstring), so a changed registry never reuses a stale kernel."""
    import hashlib
    from pathlib import Path

    import numba

    mod = registry.dispatch()
    src = registry.dispatch_source()
    assert mod.__name__ == "asyncgrpo_dispatch_" + hashlib.sha256(src.encode()).hexdigest()[:16]
    path = Path(mod.__file__)
    assert path.read_text() == src
    assert numba.config.CACHE_DIR, "asyncgrpo configures Numba's cache directory at import"
    assert path.parent == Path(numba.config.CACHE_DIR) / "dispatch"


def test_a_plugin_whose_backend_breaks_its_contract_is_refused(load_plugins):
    """A plugin's backends are checked at registration (issue 38): a NumPy map returning a scalar is refused."""
    with pytest.raises(ValueError, match="p39_scalar.*NumPy"):
        load_plugins(a="(Estimator('p39_scalar', 'trajectory', numpy=lambda ell, eps: 0.0, numba=lw_nb, torch=lw_torch),)")


@pytest.mark.parametrize("name", ["not an id", "1abc", "", 3])
def test_an_estimator_name_must_be_identifier_like(name):
    tis = registry.entry("tis")
    with pytest.raises(ValueError, match="name must be an identifier"):
        registry.Estimator(name, "trajectory", numpy=tis.numpy, numba=tis.numba, torch=tis.torch)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_an_estimator_backend_must_be_callable(backend):
    tis = registry.entry("tis")
    kw = dict(numpy=tis.numpy, numba=tis.numba, torch=tis.torch)
    kw[backend] = None
    with pytest.raises(ValueError, match=f"{backend} must be callable"):
        registry.Estimator("p39_cb", "trajectory", **kw)


def test_torch_tokens_must_be_callable_and_on_a_trajectory_map():
    """``torch_tokens`` (a trajectory map reading each token in the torch loss) is refused when it is not
    callable, and on a token-level map (which reads the tokens already); accepted on a trajectory map."""
    tis, tok = registry.entry("tis"), registry.entry("verl_tok_tis")
    kw = dict(numpy=tis.numpy, numba=tis.numba, torch=tis.torch)
    fn = registry.entry("verl_seq_rs").torch_tokens
    with pytest.raises(ValueError, match="torch_tokens must be callable, on a trajectory-level map"):
        registry.Estimator("p39_tt", "trajectory", torch_tokens=3.0, **kw)
    with pytest.raises(ValueError, match="torch_tokens must be callable, on a trajectory-level map"):
        registry.Estimator("p39_tt", "token", numpy=tok.numpy, numba=tok.numba, torch=tok.torch, torch_tokens=fn)
    assert registry.Estimator("p39_tt", "trajectory", torch_tokens=fn, **kw).torch_tokens is fn
    assert registry.Estimator("p39_tt", "trajectory", **kw).torch_tokens is None


def test_an_estimator_is_immutable_once_made():
    """A registry entry is a frozen record: the learner, the protocol and the report read the same attributes."""
    import dataclasses

    e = registry.entry("gmc")
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.capped = not e.capped
    assert registry.entry("gmc").capped is e.capped


def test_a_plugin_calling_sys_exit_at_import_is_a_usage_error_exit_2(load_plugins, capsys):
    """A plugin module that calls ``sys.exit`` while imported ends the program with exit status 2 (a usage error)
    and one line naming the module and the call (registry docstring), whatever code it passed."""
    with pytest.raises(SystemExit) as info:
        load_plugins(a="MAPS = ()\nsys.exit(0)")
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "t39_a" in err and "sys.exit(0)" in err


def test_plugins_are_probed_at_the_registrys_default_token_parameters(load_plugins, monkeypatch):
    """Each plugin's backends are called once at registration with the token parameters' defaults
    (plugin_checks.check_backends: ε_low 0.2, ε_high 0.28, τ 0.04, no dual clip, CISPO "upper", whose mode index
    the Numba backend receives)."""
    import math

    from asyncgrpo.estimators import plugin_checks
    from asyncgrpo.estimators.token_level import CISPO_CLAMPS

    seen = []
    monkeypatch.setattr(plugin_checks, "check_backends", lambda e, mod, p: seen.append((e.name, mod, p)))
    load_plugins(a="(tok('p39_probe'), traj('p39_probe_t'))")
    assert [(n, m) for n, m, _ in seen] == [("p39_probe", "t39_a"), ("p39_probe_t", "t39_a")]
    p = seen[0][2]
    assert (p.eps_low, p.eps_high, p.tau_m2, p.log_c, p.cispo_clamp) == (0.2, 0.28, 0.04, math.inf, "upper")
    assert p.cispo_mode == CISPO_CLAMPS.index(p.cispo_clamp) == 0


def test_a_damaged_dispatch_module_is_rewritten(monkeypatch, tmp_path):
    """The generated dispatch module is content-addressed; a file under its name whose text is not the source
    (truncated, edited) is rewritten before it is imported, never trusted. (In a folder of its own: the shared
    cache's file is not touched.)"""
    from pathlib import Path

    monkeypatch.setattr(registry, "_dispatch_dir", lambda: tmp_path)
    monkeypatch.setattr(registry, "_DISPATCH", None)
    mod = registry.dispatch()
    path, src = Path(mod.__file__), registry.dispatch_source()
    assert path.parent == tmp_path and path.read_text() == src
    monkeypatch.setattr(registry, "_DISPATCH", None)
    path.write_text(src[: len(src) // 2] + "\nraise RuntimeError('damaged')\n")
    again = registry.dispatch()
    assert path.read_text() == src and again.__file__ == mod.__file__


def test_attribute_defaults_take_nothing_optional():
    """An Estimator that names no option takes none: no dual clip, no cispo clamp, no rejection, ε used."""
    tis = registry.entry("tis")
    e = registry.Estimator("p39_def", "trajectory", numpy=tis.numpy, numba=tis.numba, torch=tis.torch)
    assert (e.dual_clip, e.cispo_clamp, e.rejects, e.correction, e.in_class, e.capped, e.reports_clip) == (False,) * 7
    assert e.uses_eps is True and e.clip_ratio == "none" and e.code is None and e.peer is None
    assert e.torch_tokens is None and e.objective is None and e.metrics is None


def test_the_dispatch_can_be_built_again_in_an_existing_folder(monkeypatch):
    first = registry.dispatch()
    monkeypatch.setattr(registry, "_DISPATCH", None)
    again = registry.dispatch()  # the folder and the file exist already: reused, not an error
    assert again.__name__ == first.__name__ and again.__file__ == first.__file__


def test_a_valid_plugin_reading_eps_low_is_accepted(load_plugins):
    """The registration probe uses valid parameters (0 < ε_low < 1): a map finite for every valid ε_low, here
    through log ε_low and log(1 − ε_low), passes it."""
    extra = '''
def k_eps(ell, mask, adv, T_i, p):
    return np.full_like(ell, math.log1p(-p.eps_low) - math.log(p.eps_low))


@njit(cache=True)
def k_eps_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    for i in range(out.shape[0]):
        Ti = 0
        for t in range(out.shape[1]):
            Ti += mask[i, t]
        for t in range(out.shape[1]):
            out[i, t] = (math.log1p(-eps_low) - math.log(eps_low)) / Ti if mask[i, t] else 0.0


def k_eps_torch(ell, mask, adv, T_i, p):
    import torch
    return torch.full_like(ell, math.log1p(-p.eps_low) - math.log(p.eps_low))
'''
    ents = load_plugins(a=extra + "\nMAPS = (Estimator('p39_eps', 'token', numpy=k_eps, numba=k_eps_nb, torch=k_eps_torch),)")
    assert ents["p39_eps"].code == 200


@pytest.mark.parametrize("code,ok", [(2**31 - 1, True), (2**31, False), (-1, False)])
def test_a_code_must_fit_the_int32_literal_of_the_numba_dispatch(load_plugins, code, ok):
    """Codes are literals compared with an int64 argument in the generated dispatch: ``0 ≤ code < 2**31``."""
    if ok:
        assert load_plugins(a=f"(traj('p39_edge', code={code}),)")["p39_edge"].code == code
    else:
        with pytest.raises(ImportError, match=r"code must be an int in \[0, 2\*\*31\)"):  # raised at import of the module
            load_plugins(a=f"(traj('p39_edge', code={code}),)")
