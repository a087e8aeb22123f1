"""The ladder's transformer rung (issue 33; simulate/bridge/transformer.py, simulate/llm/exact_j.py): exact J by
teacher forcing, the strict reward, the rung's cache keys and the LM protocol's unchanged config hashes."""
from __future__ import annotations

import hashlib
import json
import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from simulate.bridge import transformer as tr  # noqa: E402
from simulate.llm import exact_j as xj  # noqa: E402
from simulate.llm import tasks  # noqa: E402
from simulate.llm.model import Rollout, generate  # noqa: E402
from simulate.llm.warmstart import prompt_ids  # noqa: E402

F32 = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """The rung's config with a 70-step warm start (exact J ≈ 0.3: a moderate J for the Monte Carlo check)."""
    from simulate.llm.config import WarmStartConfig
    from simulate.llm.warmstart import warm_start

    cfg = tr.base_config("test", cache_dir=str(tmp_path_factory.mktemp("cache")))
    cfg = cfg.replace(warmstart=WarmStartConfig(steps=70, batch_size=64, eta=3e-3))
    model, tok, _ = warm_start(cfg, progress=False)
    return cfg, model.eval(), tok


def test_exact_J_equals_monte_carlo_of_the_strict_reward(warm):
    cfg, model, tok = warm
    train, held = xj.split_problems(cfg.task)
    assert (len(train), len(held)) == (88, 12)
    probs, n = train[::11], 1024  # 8 prompts, n completions each
    J_p = np.exp(xj.answer_logprob(model, tok, probs).double().numpy())
    assert 0.05 < J_p.mean() < 0.95  # a J where the Monte Carlo check has power
    batch = [p for p in probs for _ in range(n)]
    ro = generate(model, [prompt_ids(tok, p) for p in batch], max_new_tokens=cfg.max_new_tokens, eos_id=tok.eos_id,
                  pad_id=tok.pad_id, generator=torch.Generator().manual_seed(20261204))
    R = xj.strict_rewards(tok, batch, ro)
    mc, exact = R.mean(), J_p.mean()
    se = math.sqrt(np.sum(J_p * (1 - J_p) / n)) / len(probs)  # SE of the mean of 8 independent n-sample means
    assert abs(mc - exact) <= 4 * se, (mc, exact, se)
    # prompt by prompt too (a J assigned to the wrong prompt keeps the mean): 5 binomial SE each
    mc_p = R.reshape(len(probs), n).mean(1)
    assert np.all(np.abs(mc_p - J_p) <= 5 * np.sqrt(J_p * (1 - J_p) / n) + 1 / n), (mc_p, J_p)
    # the harness's lenient reward scores at least every strict hit (R_h >= R_s pointwise)
    assert xj.reward_gap(tok, batch, ro, R) >= 0


class _Oracle(torch.nn.Module):
    """Teacher forcing's next token gets probability q at every position (it peeks at the next input id)."""

    def __init__(self, V: int, q: float):
        super().__init__()
        self.V, self.q = V, q
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None, **kw):
        N, L = input_ids.shape
        nxt = torch.cat([input_ids[:, 1:], input_ids[:, -1:]], dim=1)
        p = torch.full((N, L, self.V), (1 - self.q) / (self.V - 1), dtype=torch.float64)
        p.scatter_(-1, nxt[..., None], self.q)
        return type("Out", (), {"logits": torch.log(p).float()})()


def test_J_of_a_model_with_all_mass_on_the_answer_is_one():
    from simulate.llm.config import TaskConfig
    from simulate.llm.tokenizer import CharTokenizer

    tok = CharTokenizer()
    probs = xj.all_problems(TaskConfig(digits=1))
    assert len(probs) == 100 and probs[37].prompt == "A3+7=" and probs[37].solution == "10"
    assert xj.exact_J(_Oracle(tok.vocab_size, 1.0), tok, probs) == pytest.approx(1.0, abs=4 * F32)
    # probability q per token: J = mean_p q^(len(answer)+1) (1-digit answers: 2 tokens, 2-digit: 3)
    q = 0.7
    want = np.mean([q ** (len(p.solution) + 1) for p in probs])
    assert xj.exact_J(_Oracle(tok.vocab_size, q), tok, probs) == pytest.approx(want, rel=16 * F32)


def test_strict_reward_is_the_canonical_answer_and_eos_only():
    from simulate.llm.tokenizer import CharTokenizer

    tok = CharTokenizer()
    p = tasks.Problem("arithmetic", "A3+4=", "", "7", (3, 4), 7)
    texts = ["7", "07", " 7", "7 ", "8"]
    T = 3
    comp = torch.full((len(texts) + 1, T), tok.pad_id)
    mask = torch.zeros((len(texts) + 1, T), dtype=torch.bool)
    for i, t in enumerate(texts):
        ids = tok.encode_completion(t)[:T]
        comp[i, :len(ids)] = torch.tensor(ids)
        mask[i, :len(ids)] = True
    comp[-1, :1] = torch.tensor(tok.encode("7"))  # "7" cut at T without EOS (here: a 1-token row)
    mask[-1, :1] = True
    ro = Rollout(seq=comp, attn=mask.long(), mask=mask, logp_old=torch.zeros(comp.shape), prompt_len=0)
    batch = [p] * comp.shape[0]
    R = xj.strict_rewards(tok, batch, ro)
    assert R.tolist() == [1, 0, 0, 0, 0, 0]
    harness = [tasks.reward(p, tok.decode(c)) for c in comp]
    assert harness == [1, 1, 1, 1, 0, 1]  # the lenient parser accepts "07", " 7", "7 " and the cut "7"
    assert xj.reward_gap(tok, batch, ro, R) == 4


def test_bad_parameters_raise_clear_errors():
    from simulate.llm.config import TaskConfig

    with pytest.raises(ValueError, match="mode must be one of"):
        tr.settings("full")
    with pytest.raises(ValueError, match="estimator must be one of"):
        tr.base_config(estimator="tis")
    for d in (-1, 33, 8.0, True):
        with pytest.raises(ValueError, match="d must be an integer in 0..32"):
            tr.base_config(d=d)
    with pytest.raises(ValueError, match="protocol must be 't2'"):
        tr.run_cell(estimator="gmc", d=0, seed=0, mode="test", protocol="t0")
    with pytest.raises(ValueError, match="digits must be in 1..3"):
        xj.all_problems(TaskConfig(digits=4))
    with pytest.raises(ValueError, match="task must be 'arithmetic'"):
        xj.all_problems(TaskConfig(task="countdown"))
    with pytest.raises(ValueError, match="problems must be a non-empty list"):
        xj.answer_logprob(_Oracle(24, 1.0), None, [])
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        xj.answer_logprob(_Oracle(24, 1.0), None, xj.all_problems(TaskConfig(digits=1))[:1], temperature=0.0)


def test_rung_cache_keys_are_stable():
    from sweep.cache import cell_key

    sw = tr.rung_sweep("standard")
    assert len(sw.cells) == 4 * 3 * 12 and sw.id == "bridge-transformer-standard"
    c0, c1 = sw.cells[0], sw.cells[-1]
    assert (c0.id, c1.id) == ("onpolicy-d0-s0", "grpo-d32-s11")
    assert c0.settings == {"estimator": "onpolicy", "d": 0, "seed": 0, "mode": "standard",
                           "cache_dir": "results/bridge/llm-cache", "protocol": "t2"}
    # the key given a code version (the engine adds the package hash): a change of settings is a new key
    assert cell_key(sw.fn, c0.settings, "v") == "f99595193f732118f28f9b99"
    assert cell_key(sw.fn, c1.settings, "v") == "251309b14d8340b3c9dbbc33"


def test_protocol_t2_starts_every_run_from_the_committed_warm_start_in_float64(tmp_path):
    """t2 (module docstring): the registered file, its SHA-256, float64; the warm start is that file (no training),
    so every machine starts from the same policy; ``frozen=False`` gives t1's float32 supervised settings."""
    from simulate.llm.portability.frozen_warmstart import file_sha256, resolve
    from simulate.llm.warmstart import warm_start

    cfg = tr.base_config("test", cache_dir=str(tmp_path))
    assert cfg.dtype == "float64" and cfg.warmstart.frozen == tr.PROTOCOL["warmstart_frozen"]
    assert file_sha256(resolve(cfg.warmstart.frozen)) == cfg.warmstart.frozen_sha256
    model, _, info = warm_start(cfg, progress=False)
    assert info["frozen"] is True and info["steps"] == tr.PROTOCOL["warmstart_steps"]
    assert next(model.parameters()).dtype == torch.float64
    assert not (tmp_path / "warmstart").exists()  # loaded, not trained and cached
    t1 = tr.base_config("test", frozen=False)
    assert t1.dtype == "float32" and t1.warmstart.frozen == "" and t1.warmstart.frozen_sha256 == ""


def test_existing_lm_config_hashes_are_unchanged(monkeypatch):
    """The LM protocol's configs hash as before the rung was added (values computed at 2596c29, before it):
    the flattened sweep settings, ``to_dict`` and the warm-start key (its settings part: the source hash is
    fixed here, so an edit of the LM's sources does not fail this test, a new config field does)."""
    from simulate.llm import config as C
    from simulate.llm.experiment import config_settings, protocol_base
    from simulate.llm.protocol import PROTOCOL_V4, PROTOCOL_V5

    def h(x):
        return hashlib.sha256(json.dumps(x, sort_keys=True, default=repr).encode()).hexdigest()[:16]

    monkeypatch.setattr(C, "_source_hash", lambda modules: "fixed")
    got = {P.version: (h(config_settings(protocol_base(P))), h(protocol_base(P).to_dict()),
                       C.warmstart_key(protocol_base(P))) for P in (PROTOCOL_V5, PROTOCOL_V4)}
    assert got == {5: ("d67f18205205397c", "5580a48219fde3e3", "a9f1db7735ed0ae4"),
                   4: ("bf1794defd92bd7b", "69a8f7c75cae0a66", "9d8479ec1240e31d")}


def test_cells_cached_resumed_and_damaged_cell_recomputed(tmp_path):
    from sweep import SweepCacheWarning, run_sweep

    from simulate.llm.warmstart import warm_start

    cache = str(tmp_path / "cache")
    warm_start(tr.base_config("test", cache_dir=cache), progress=False)
    sw = tr.rung_sweep("test", cache)
    kw = dict(root=tmp_path / "cells", backend="serial", progress=False)
    first = run_sweep(sw, **kw)
    assert len(first.computed) == len(sw.cells) == 12
    again = run_sweep(sw, **kw)
    assert len(again.computed) == 0  # a warm rerun recomputes nothing
    damaged = next(first.directory.glob("*.parquet"))
    damaged.write_bytes(damaged.read_bytes()[:-40])
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        third = run_sweep(sw, **kw)
    assert len(third.computed) == 1 and any(issubclass(x.category, SweepCacheWarning) for x in w)
    rows = tr.run_rows(third.table)
    assert len(rows) == 12 and set(rows["estimator"]) == set(tr.ESTIMATORS) and (rows["J0"] == rows["J0"].iloc[0]).all()
    cols = ["J", "J_heldout", "reward", "chi2", "ess"]
    a, b = (t.table.sort_values(["estimator", "d", "k"])[cols].to_numpy(dtype=float) for t in (first, third))
    np.testing.assert_array_equal(a, b)  # the recomputed cell gives the same numbers


def test_fig_bridge_section_reports_the_transformer_rung_from_its_table():
    import pandas as pd

    from figures.fig_bridge import section, transformer_paragraph
    from simulate.bridge.summary import ladder_table

    rng = np.random.default_rng(0)
    rows = []
    for e in tr.ESTIMATORS:
        for d in tr.DELAYS:
            for s in range(12):
                bad = e == "onpolicy" and d == 32
                rows.append(dict(rung=tr.RUNG, arm=tr.ARM, estimator=e, d=d, eta=3e-4, seed=s, J0=0.57,
                                 nauc=(-0.2 if bad else 0.3) + 0.01 * rng.standard_normal(), failed=bad,
                                 final_nJ=0.2, chi2_learn_med=0.1, ess_early=7.0, gneg_early=math.nan,
                                 gdot_early=math.nan, down_frac=math.nan))
    tab_t = ladder_table(pd.DataFrame(rows), [tr.RUNG]).assign(arm=tr.ARM, gap_rate=0.0123)
    for e in tr.ESTIMATORS:
        tab_t[f"J_final_{e}"] = 0.6
    text = transformer_paragraph(tab_t)
    r = tab_t[tab_t.d == 32].iloc[0]
    assert f"{r['d_onpolicy']:+.3f} [{r['lo_onpolicy']:+.3f}, {r['hi_onpolicy']:+.3f}]" in text
    assert "fails onpolicy 12/12" in text and "1.23 %" in text and "J₀ = 0.570" in text
    ladder = ladder_table(pd.DataFrame([dict(x, rung="0-tabular", arm="η₀", gneg_early=0.01) for x in rows]),
                          ["0-tabular"]).assign(arm="η₀")
    sec, _ = section(ladder, ["0-tabular"], tab_t)
    assert text in sec["paragraphs"]
    # the ladder table (issue 54: rung, d, gmc − onpolicy at each arm, failures onpolicy/gmc): the transformer rung's rows
    got = [row for row in sec["tables"][0]["rows"] if row[0] == f"{tr.RUNG} (LM η)"]
    assert [row[1] for row in got] == [8, 32] and got[1][-1] == "12/0" and got[0][-1] == "0/0"
