"""Issue 38 (reliability round 4): hostile plugins and inputs in the core, each refused with one clear error.

Plugin estimators are written to a temporary folder and named in ``$ASYNCGRPO_ESTIMATORS``; in-process tests
clear the registry's cache (``registry._ENTRIES``) and read it afresh, subprocess tests start a fresh Python.
Item numbers are the issue's; docs/faults.md lists each with its test.
"""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from asyncgrpo.estimators import loss_metrics as lm
from asyncgrpo.estimators import registry
from asyncgrpo.estimators.registry import Estimator
from asyncgrpo.estimators.token_level import policy_loss
from asyncgrpo.functionals import advantages
from asyncgrpo.integrations import verl as av
from _plugin_source import SOUND_TRAJECTORY

ROOT = Path(__file__).resolve().parents[1]

# A plugin's parts: a sound trajectory map (tis) and its three backends; each test swaps the one it breaks.
HEADER = SOUND_TRAJECTORY + '''

@njit(cache=True)
def lw_nb_half(ell, eps, out):
    for i in range(ell.shape[0] - 1):  # forgets the last entry
        out[i] = min(ell[i], math.log1p(eps))


def lw_torch_nan_far(ell, eps, mask):
    import torch
    # sound on moderate log-ratios (the registration probe), NaN past |l| > 5
    return torch.where(ell.abs() > 5, torch.full_like(ell, math.nan), torch.clamp(ell, max=math.log1p(eps)))
'''


@pytest.fixture
def plugin(monkeypatch, tmp_path):
    """``plugin(body)``: write module ``t38_plugin`` (HEADER + body), name it in ``$ASYNCGRPO_ESTIMATORS`` and
    return the registry's entries read afresh (raising what the registry raises)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_ENTRIES", None)
    written = []

    def load(body: str):
        path = tmp_path / "t38_plugin.py"
        path.write_text(HEADER + textwrap.dedent(body))
        written.append(path)
        sys.modules.pop("t38_plugin", None)
        monkeypatch.setenv(registry.ENV_VAR, "t38_plugin")
        monkeypatch.setattr(registry, "_ENTRIES", None)
        return registry.entries()

    yield load
    sys.modules.pop("t38_plugin", None)


def _run(code: str, tmp_path: Path, plugin_src: str | None = None, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    env.pop(registry.ENV_VAR, None)
    if plugin_src is not None:
        (tmp_path / "t38_sub.py").write_text(HEADER + textwrap.dedent(plugin_src))
        env[registry.ENV_VAR] = "t38_sub"
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)


# --------------------------------------------------------------------------- item 2: the plugin's source keys caches
def test_plugin_fingerprint_follows_the_source_and_keys_the_sweep_cells(monkeypatch, tmp_path):
    """Editing a plugin's formula changes ``plugin_fingerprint`` and the sweep cells' code version (so stale
    protocol cells are not reused). Seen failing: before, the sweep version ignored the plugin (equal)."""
    from sweep import cache

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv(registry.ENV_VAR, raising=False)
    assert registry.plugin_fingerprint() == {}
    base = cache.sweep_version("simulate.protocol.cells:run_cell")
    src = tmp_path / "t38_fp.py"
    src.write_text(HEADER + "MAPS = (Estimator('t38_fp', 'trajectory', numpy=lw, numba=lw_nb, torch=lw_torch),)\n")
    monkeypatch.setenv(registry.ENV_VAR, "t38_fp")
    first = registry.plugin_fingerprint()
    v1 = cache.sweep_version("simulate.protocol.cells:run_cell")
    assert set(first) == {"t38_fp"} and len(first["t38_fp"]) == 64 and v1 != base
    src.write_text(src.read_text().replace("math.log1p(eps))\n\n\n@njit", "math.log1p(2 * eps))\n\n\n@njit", 1))
    second = registry.plugin_fingerprint()
    assert second["t38_fp"] != first["t38_fp"]
    assert cache.sweep_version("simulate.protocol.cells:run_cell") not in (v1, base)
    monkeypatch.setenv(registry.ENV_VAR, "t38_no_such_module")
    with pytest.raises(ValueError, match="t38_no_such_module"):
        registry.plugin_fingerprint()


# --------------------------------------------------------------------------- items 5, 8, 23, 24: registration checks
def test_a_numba_kernel_leaving_out_unwritten_is_refused_at_registration(plugin):
    """Item 8. Seen failing: the plugin registered and ``WeightMap.numba`` returned whatever ``out`` held."""
    with pytest.raises(ValueError, match=r"'t38_half'.*t38_plugin.*Numba.*unwritten"):
        plugin("MAPS = (Estimator('t38_half', 'trajectory', numpy=lw, numba=lw_nb_half, torch=lw_torch),)\n")


def test_a_sound_plugin_registers_and_its_numba_kernel_is_deterministic(plugin):
    ents = plugin("MAPS = (Estimator('t38_ok', 'trajectory', numpy=lw, numba=lw_nb, torch=lw_torch),)\n")
    assert ents["t38_ok"].code >= 100


def test_a_code_beyond_the_dispatch_range_is_refused_when_declared():
    """Item 23: ``code=2**70`` registered, then failed as a Numba TypingError. Seen failing: no error here."""
    with pytest.raises(ValueError, match=r"'t38_big'.*code must be an int in \[0, 2\*\*31\)"):
        Estimator("t38_big", "trajectory", numpy=np.exp, numba=registry.dispatch().log_weights_nb, torch=np.exp,
                  code=2**70)


@pytest.mark.parametrize("backend, body, match", [
    ("numpy", "def bad(ell, eps):\n    return 0.5\n", r"'t38_bad'.*NumPy backend returned shape \(\)"),
    ("numpy", "def bad(ell, eps):\n    return np.full(ell.shape, math.nan)\n", r"'t38_bad'.*NumPy.*log w = nan"),
    ("numpy", "def bad(ell, eps):\n    return np.full(ell.shape, math.inf)\n", r"'t38_bad'.*NumPy.*log w = inf"),
    ("torch", "def bad(ell, eps, mask):\n    return 1.0\n", r"'t38_bad'.*torch backend returned shape \(\)"),
])
def test_a_backend_returning_a_scalar_or_nan_is_refused_naming_it(plugin, backend, body, match):
    """Items 24 and 5: a scalar from the NumPy backend (an unclear dtype error in ``policy_loss`` before) and NaN
    or inf weights (a diverged run, no word before) are refused at registration, naming the estimator, the
    module and the backend. Seen failing: each registered."""
    kw = {"numpy": "lw", "torch": "lw_torch"}
    kw[backend] = "bad"
    with pytest.raises(ValueError, match=match):
        plugin(body + f"MAPS = (Estimator('t38_bad', 'trajectory', numpy={kw['numpy']}, numba=lw_nb, "
                      f"torch={kw['torch']}),)\n")


POLICY_LOSS_SCRIPT = """
import torch
from asyncgrpo.estimators.token_level import policy_loss
old = torch.zeros(4, 3, dtype=torch.float64)
mask = torch.ones(4, 3, dtype=torch.bool)
adv = torch.tensor([1.0, -1.0, 0.5, -0.5], dtype=torch.float64)
print("near", bool(torch.isfinite(policy_loss("t38_far", old.clone().requires_grad_(True), old, adv, mask, group_size=4))))
new = old.clone()
new[0] = 3.0  # ell_0 = 9 > 5: the map's NaN region
try:
    loss = policy_loss("t38_far", new.requires_grad_(True), old, adv, mask, group_size=4)
    print("far", float(loss))
except ValueError as exc:
    print("far ValueError", exc)
"""


def test_nan_weights_from_a_plugin_past_the_probe_raise_in_policy_loss_naming_it(tmp_path):
    """Item 5 at run time: a map sound on the probe but NaN at ``|ℓ| > 5`` made ``policy_loss`` +inf with a
    non-finite gradient and no error. Seen failing: printed ``far inf``, nothing raised."""
    proc = _run(POLICY_LOSS_SCRIPT, tmp_path,
                "MAPS = (Estimator('t38_far', 'trajectory', numpy=lw, numba=lw_nb, torch=lw_torch_nan_far),)\n")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "near True" in proc.stdout
    assert "far ValueError estimator 't38_far' returned log w = nan" in proc.stdout, proc.stdout


# --------------------------------------------------------------------------- items 9, 10: sys.exit
def test_a_plugin_calling_sys_exit_at_import_is_one_clear_error(tmp_path):
    """Item 9: every entry point exited 3 with no message. Seen failing: exit 3, empty stderr."""
    proc = _run("import asyncgrpo", tmp_path, "sys.exit(3)\nMAPS = ()\n")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "t38_sub" in lines[0] and "sys.exit(3)" in lines[0] and "ASYNCGRPO_ESTIMATORS" in lines[0]


def test_check_of_a_map_calling_sys_exit_0_is_a_usage_error_not_a_pass(tmp_path):
    """Item 10: ``python -m asyncgrpo.check`` exited 0 with no output. Seen failing: exit 0."""
    (tmp_path / "t38_exitmap.py").write_text("import sys\n\n\ndef fn(ell, eps):\n    sys.exit(0)\n")
    proc = _run("", tmp_path, None, "-m", "asyncgrpo.check", "t38_exitmap:fn", "--max-examples", "5")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "t38_exitmap:fn called sys.exit(0)" in lines[0], proc.stderr
    assert proc.stdout == ""


# --------------------------------------------------------------------------- item 21: advantages
def test_advantages_near_the_float64_limit_are_not_silent_zeros():
    """``std([0, 1e308])`` overflows: A was [0, 0]. Seen failing: returned zeros."""
    np.testing.assert_array_equal(advantages([0.0, 1e308], normalize=True), [-1.0, 1.0])
    big = advantages([-1.7e308, 1.7e308, 1.7e308], normalize=True)
    np.testing.assert_allclose(big, [-math.sqrt(2), 1 / math.sqrt(2), 1 / math.sqrt(2)], rtol=8 * np.finfo(float).eps)
    with pytest.raises(ValueError, match="exceed float64"):
        advantages([-1.7e308, 1.7e308, 1.7e308])  # unnormalised, R − R̄ = −2.3e308 is not a float64
    # the ordinary range is the direct formula, bit for bit
    R = np.array([0.3, 1.0, 0.0, 0.7])
    np.testing.assert_array_equal(advantages(R, normalize=True), (R - R.mean()) / (R.std() + 1e-6))


@pytest.mark.parametrize("delta", [math.inf, math.nan, 0.0, -1e-6, True])
def test_advantages_refuse_a_delta_that_is_not_finite_and_positive(delta):
    """``delta=inf`` was accepted (every A = 0). Seen failing: no error for inf."""
    with pytest.raises(ValueError, match="delta must be a finite number > 0"):
        advantages([0.0, 1.0], normalize=True, delta=delta)


# --------------------------------------------------------------------------- item 22: all-masked batches
def test_clamped_ess_and_verl_weights_on_an_all_masked_batch_raise_a_clear_error():
    """A raw torch ``RuntimeError`` (max() of an empty tensor) before. Seen failing: RuntimeError."""
    z = torch.zeros(2, 3, dtype=torch.float64)
    none = torch.zeros(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="mask has no real token"):
        lm.clamped_ess(z, none, 2.0)
    with pytest.raises(ValueError, match="response_mask has no response token"):
        av.compute_trajectory_weights(z, z, none.double(), np.array(["a", "a"], dtype=object))


# --------------------------------------------------------------------------- item 25: verl uids
def test_verl_uids_group_as_verls_dict_does_and_nan_is_refused():
    """verl groups rows by ``defaultdict`` keys (``compute_grpo_outcome_advantage``): ``1``, ``1.0`` and ``True``
    are one key there, so one group here; ``"1"`` is another. A NaN uid is not equal to itself: verl would
    group it by object identity, so it is refused. Seen failing: NaN uids were accepted (one group per row)."""
    group, slot = av.group_index(np.array([1, 1.0, True, "1"], dtype=object))
    assert group.tolist() == [0, 0, 0, 1] and slot.tolist() == [0, 1, 2, 0]
    keys: dict = {}
    for u in (1, 1.0, True, "1"):
        keys.setdefault(u, len(keys))  # what verl's defaultdict does
    assert [keys[u] for u in (1, 1.0, True, "1")] == group.tolist()
    for uid in ([float("nan"), float("nan")], [np.nan, np.nan], ["a", np.float32("nan")]):
        with pytest.raises(ValueError, match="NaN id"):
            av.group_index(np.array(uid, dtype=object))
