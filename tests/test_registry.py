"""The estimator registry (issue 28 item 7): one module per estimator, the dispatch built from the records,
no estimator code named outside the registry, and an estimator added from a temporary module reaching the
learner, the property kit and the parity suite."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asyncgrpo import estimators as est
from asyncgrpo.estimators import kernels, registry
from asyncgrpo.estimators import token_level as tl
from asyncgrpo.testing import check_backends

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", registry.names())
def test_parity_suite_on_every_registered_estimator(name):
    worst = check_backends(name)
    assert set(worst) == {"numba-numpy", "torch-numpy"}


def test_kernel_flags_are_the_registry_attributes():
    for name, e in registry.entries().items():
        token, clip, reports = kernels.estimator_flags_nb(e.code)
        assert token == (e.level == "token") and reports == e.reports_clip, name
        assert registry.CLIP_RATIOS[clip] == e.clip_ratio, name
    with pytest.raises(ValueError, match="unknown estimator code"):
        kernels.estimator_flags_nb(999)


def test_names_and_codes_are_one_table():
    assert set(est.TRAJECTORY_ESTIMATORS) | set(tl.TOKEN_ESTIMATORS) == set(registry.names())
    assert est.ESTIMATORS == ("onpolicy", "is", "tis", "tic", "gmc", "snis")
    codes = [e.code for e in registry.entries().values()]
    assert len(set(codes)) == len(codes)
    assert {n: registry.code(n) for n in tl.TOKEN_ESTIMATORS} == tl.TOKEN_CODES
    with pytest.raises(ValueError, match="unknown token-level estimator 'gmc'"):
        registry.entry("gmc", "token")


def test_no_kernel_outside_the_registry_names_an_estimator_code():
    # `code == 11`, `code >= 10`, `code in (2, 3)`: properties must come from registry attributes instead
    pat = re.compile(r"\bcode\s*(==|!=|>=|<=|>|<)\s*\d|\bcode\s+(not\s+)?in\s*[\(\[{]\s*\d")
    skip = {ROOT / "asyncgrpo/estimators/registry.py"}
    hits = []
    for pkg in ("asyncgrpo", "simulate"):
        for f in (ROOT / pkg).rglob("*.py"):
            if f in skip:
                continue
            for i, line in enumerate(f.read_text().splitlines(), 1):
                if pat.search(line):
                    hits.append(f"{f.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_every_peer_runs_in_the_learner():
    from simulate.delays import fixed
    from simulate.training import InstanceSpec, TrainConfig, run_many

    spec = InstanceSpec(kind="token", V=3, T=4, state="count", reward="count_ge", k=2)
    cfgs = [TrainConfig(instance=spec, estimator=e, G=8, eta=1.0, steps=60, delay=fixed(2), seed=0)
            for e in est.PEER_ESTIMATORS]
    for r in run_many(cfgs):
        name = r.config.estimator
        assert not r.diverged, name
        assert np.isfinite(r.J).all(), name
        # every peer reports a clip/rejection fraction in [0, 1]
        cf = r.clip_frac[np.isfinite(r.clip_frac)]
        assert cf.size == r.clip_frac.size and np.all((cf >= 0) & (cf <= 1)), name


def test_a_peer_runs_through_a_protocol_cell():
    from simulate.protocol import load_protocol
    from simulate.protocol.cells import run_cell

    p = load_protocol(quick=True)
    assert p.start_grid("verl_tok_tis") == p.start_grid("grpo")  # length-normalised ĝ: the token grid
    assert p.start_grid("verl_seq_tis") == p.start_grid("tis")
    df = run_cell("count-frac", "trl_seq_mask", 2, 0.2, 4, p)
    assert (df.estimator == "trl_seq_mask").all() and np.isfinite(df.nauc).all()


def test_property_kit_reports_the_peers_membership_honestly():
    from asyncgrpo.testing import MEMBERSHIP, check_weight_map, registry_map

    def member(name, eps):
        rep = check_weight_map(registry_map(name), eps=eps, max_examples=40)
        return rep.is_member

    # verl_seq_rs renormalises its kept rows within the group (G/G_kept, issue 57): a kept row beside a rejected one
    # gets w > ρ, so it is a member at no ε (before: w ≤ ρ and mean ≤ C = 2, a member exactly when 1 + ε ≥ 2)
    assert member("verl_seq_rs", 1.0) is False
    assert member("verl_seq_rs", 0.2) is False
    # verl_seq_tis: its floor e^{−20} exceeds ρ for ℓ < −20: never a member
    assert member("verl_seq_tis", 1.0) is False
    with pytest.raises(ValueError, match="token-level estimator"):
        registry_map("verl_geo_rs")
    assert MEMBERSHIP


TOY = '''"""A toy estimator in one file: tis under another name (w_i = min(ρ_i, 1+ε))."""
import math

import numpy as np
from numba import njit

from asyncgrpo.estimators.registry import Estimator


def log_weights(ell, eps):
    return np.minimum(ell, math.log1p(eps))


@njit(cache=True)
def log_weights_nb(ell, eps, out):
    cap = math.log1p(eps)
    for i in range(ell.shape[0]):
        out[i] = ell[i] if ell[i] < cap else cap


def log_weights_torch(ell, eps, mask):
    import torch

    return torch.clamp(ell, max=math.log1p(eps))


MAPS = (Estimator("toy_tis", "trajectory", numpy=log_weights, numba=log_weights_nb, torch=log_weights_torch,
                  capped=True, reports_clip=True, formula="min(ρ_i, 1+ε)"),)
'''

SCRIPT = '''
import json
import numpy as np
from asyncgrpo import estimators as est
from asyncgrpo.estimators import registry
from asyncgrpo.testing import check_backends, check_weight_map, registry_map
from simulate.delays import fixed
from simulate.training import InstanceSpec, TrainConfig, run_many

out = {"code": registry.code("toy_tis"), "names": list(est.TRAJECTORY_ESTIMATORS)}
out["parity"] = check_backends("toy_tis")
spec = InstanceSpec(kind="token", V=3, T=3, state="prev", reward="sum_mod", m=3)
cfgs = [TrainConfig(instance=spec, estimator=e, G=4, eta=2.0, steps=40, delay=fixed(3), seed=s)
        for e in ("toy_tis", "tis") for s in (0, 1)]
r = run_many(cfgs)
out["learner_equal"] = all(np.array_equal(getattr(r[i], f), getattr(r[i + 2], f), equal_nan=True)
                           for i in (0, 1) for f in ("J", "clip_frac", "ess", "ghat_norm2", "theta"))
out["learner_clip_reported"] = bool(np.isfinite(r[0].clip_frac).all())
rows = {}
for name in ("toy_tis", "tis"):
    rep = check_weight_map(registry_map(name), eps=0.2, max_examples=30)
    rows[name] = {"member": rep.is_member, "verdicts": rep.to_frame()["verdict"].to_dict()}
out["kit"] = rows
print("RESULT" + json.dumps(out))
'''


def test_an_estimator_from_a_temporary_module_reaches_the_learner_kit_and_parity(tmp_path):
    """The recipe of docs/estimators.md end to end: one file, named in $ASYNCGRPO_ESTIMATORS. The toy is tis under
    another name, so the learner's runs must be bit-identical to tis's and the kit's verdicts the same."""
    (tmp_path / "toy_estimators.py").write_text(TOY)
    env = dict(os.environ, ASYNCGRPO_ESTIMATORS="toy_estimators",
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=900,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert out["code"] >= 100 and "toy_tis" in out["names"]
    assert out["learner_equal"] and out["learner_clip_reported"]
    assert out["kit"]["toy_tis"]["member"] is True
    assert out["kit"]["toy_tis"]["verdicts"] == out["kit"]["tis"]["verdicts"]


def test_a_broken_extra_module_is_named(tmp_path):
    (tmp_path / "bad_estimators.py").write_text("MAPS = ('not an Estimator',)\n")
    env = dict(os.environ, ASYNCGRPO_ESTIMATORS="bad_estimators",
               PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", "import asyncgrpo.estimators"], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0 and "bad_estimators" in proc.stderr and "MAPS" in proc.stderr
