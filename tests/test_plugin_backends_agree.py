"""Issue 56 item 10: a plugin's registration compares its backends and its declared class, not only their shapes.

A plugin whose Numba kernel differs from its NumPy reference by 0.038, one whose torch backend differs, a token
map whose torch weights differ, and one declared ``in_class`` whose weights exceed ρ (or whose group mean passes
1+ε) registered before; each is now refused at registration with a ValueError naming the estimator, its module and
the backend. A sound plugin (tis in three backends, declared in class) still registers."""
from __future__ import annotations

import sys
import textwrap

import pytest

from asyncgrpo.estimators import registry
from _plugin_source import SOUND_TRAJECTORY

HEADER = SOUND_TRAJECTORY + '''

@njit(cache=True)
def lw_nb_off(ell, eps, out):
    for i in range(ell.shape[0]):
        out[i] = min(ell[i], math.log1p(eps)) + 0.038  # 0.038 off in log space: weights 3.9 % apart


def lw_torch_off(ell, eps, mask):
    import torch
    return torch.clamp(ell, max=math.log1p(eps)) - 0.038


def lw_over(ell, eps):
    return ell + 0.5  # w = 1.65 ρ: outside the class


@njit(cache=True)
def lw_over_nb(ell, eps, out):
    for i in range(ell.shape[0]):
        out[i] = ell[i] + 0.5


def lw_over_torch(ell, eps, mask):
    return ell + 0.5


def lw_ones(ell, eps):
    return np.zeros_like(ell) + math.log(1.5)  # w = 1.5 <= ρ fails and the mean passes 1 + ε


@njit(cache=True)
def lw_ones_nb(ell, eps, out):
    for i in range(ell.shape[0]):
        out[i] = math.log(1.5)


def lw_ones_torch(ell, eps, mask):
    import torch
    return torch.full_like(ell, math.log(1.5))


def k_np(ell, mask, adv, T_i, p):
    return np.minimum(np.exp(ell), 2.0)


@njit(cache=True)
def k_nb(tok_ell, mask, adv, eps_low, eps_high, tau_m2, log_clip_c, cispo_mode, out):
    N, T = tok_ell.shape
    for i in range(N):
        Ti = 0
        for t in range(T):
            if mask[i, t]:
                Ti += 1
        for t in range(T):
            out[i, t] = min(math.exp(tok_ell[i, t]), 2.0) / Ti if mask[i, t] else 0.0


def k_torch_off(ell, mask, adv, T_i, p):
    import torch
    return torch.clamp(torch.exp(ell), max=2.0) * 1.01
'''


@pytest.fixture
def plugin(monkeypatch, tmp_path):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry, "_ENTRIES", None)

    def load(body: str):
        (tmp_path / "t56_plugin.py").write_text(HEADER + textwrap.dedent(body))
        sys.modules.pop("t56_plugin", None)
        monkeypatch.setenv(registry.ENV_VAR, "t56_plugin")
        monkeypatch.setattr(registry, "_ENTRIES", None)
        return registry.entries()

    yield load
    sys.modules.pop("t56_plugin", None)
    monkeypatch.setattr(registry, "_ENTRIES", None)


def test_a_sound_plugin_declared_in_class_registers(plugin):
    entries = plugin('MAPS = (Estimator("t56_tis", "trajectory", numpy=lw, numba=lw_nb, torch=lw_torch, in_class=True),)')
    assert "t56_tis" in entries


@pytest.mark.parametrize("body, match", [
    ('MAPS = (Estimator("t56_nb", "trajectory", numpy=lw, numba=lw_nb_off, torch=lw_torch),)',
     r"'t56_nb' from module 't56_plugin': its Numba backend disagrees with its NumPy backend"),
    ('MAPS = (Estimator("t56_t", "trajectory", numpy=lw, numba=lw_nb, torch=lw_torch_off),)',
     r"'t56_t' from module 't56_plugin': its torch backend disagrees with its NumPy backend"),
    ('MAPS = (Estimator("t56_tok", "token", numpy=k_np, numba=k_nb, torch=k_torch_off),)',
     r"'t56_tok' from module 't56_plugin': its torch backend disagrees"),
    ('MAPS = (Estimator("t56_over", "trajectory", numpy=lw_over, numba=lw_over_nb, torch=lw_over_torch, '
     'in_class=True),)', r"'t56_over' .* declared in_class but gives w = .* > ρ"),
    ('MAPS = (Estimator("t56_mean", "trajectory", numpy=lw_ones, numba=lw_ones_nb, torch=lw_ones_torch, '
     'in_class=True),)', r"'t56_mean' .* declared in_class"),
])
def test_backends_that_disagree_or_a_false_class_are_refused_at_registration(plugin, body, match):
    with pytest.raises(ValueError, match=match):
        plugin(body)


def test_the_same_maps_not_declared_in_class_register(plugin):
    """Being outside the class is allowed (``is`` is); declaring otherwise is what is refused."""
    entries = plugin('MAPS = (Estimator("t56_over", "trajectory", numpy=lw_over, numba=lw_over_nb, '
                     'torch=lw_over_torch),)')
    assert not entries["t56_over"].in_class
