"""The LLM harness's command line and the GPU check's CPU dry run (seconds, tiny model)."""
from __future__ import annotations

import dataclasses
import os

import numpy as np
import pandas as pd
import pytest

from simulate.llm import experiment as ex
from simulate.llm.__main__ import build_parser, config_from_args, main
from simulate.llm.config import TrainConfig


def test_cli_mirrors_config_defaults():
    """Every CLI default is read from the dataclasses (issue 15): parsing no flags gives the default
    config, and each option's default equals its field's default, one by one."""
    import dataclasses

    from simulate.llm.__main__ import NESTED

    parser = build_parser()
    for command in ("train", "warmstart"):
        args = parser.parse_args([command])
        assert config_from_args(args) == TrainConfig()
        d = TrainConfig()
        for f in dataclasses.fields(TrainConfig):
            if f.name not in ("task", "warmstart"):
                assert getattr(args, f.name) == getattr(d, f.name), f.name
        for dest, cls, name in NESTED:
            assert getattr(args, dest) == getattr(cls(), name), dest
    args = parser.parse_args(["train", "--estimator", "tic", "--delay", "3", "--G", "4", "--eta", "1e-4",
                              "--no-adv-norm", "--model", "/some/dir"])
    cfg = config_from_args(args)
    assert (cfg.estimator, cfg.d, cfg.G, cfg.eta, cfg.model_path) == ("tic", 3, 4, 1e-4, "/some/dir")


def test_theory_names_match_the_tabular_config():
    """One vocabulary: fields that name the same concept as simulate.training.TrainConfig have its name."""
    import dataclasses

    from simulate.training import TrainConfig as TabularConfig

    lm = {f.name for f in dataclasses.fields(TrainConfig)}
    tab = {f.name for f in dataclasses.fields(TabularConfig)}
    for name in ("estimator", "eps", "eps_low", "eps_high", "tau_m2", "G", "n_prompts", "eta", "steps", "seed",
                 "adv_norm"):
        assert name in lm and name in tab, name
    assert not lm & {"group_size", "lr", "prompts_per_step", "normalize_adv", "max_delay", "delay_mode"}


def test_cli_bad_input_is_one_clear_error(capsys):
    assert main(["train", "--delay", "9", "--max-delay", "2"]) == 2
    assert "d must be in 0..D" in capsys.readouterr().err
    assert main(["train", "--model", "/definitely/not/here", "--steps", "1"]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_gpu_check_dry_run_end_to_end(tmp_path, capsys):
    """The GPU script's whole path (warm start, sweep, throughput, table, C9 line) on CPU in seconds."""
    assert main(["gpu-check", "--dry-run", "--experiment-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "throughput:" in out and "tokens/s" in out and "d=0" in out and "d=2" in out and "C9" in out
    assert "parity" in out and "harness tok/s" in out
    import json

    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    # CPU against CPU: the parity rows must be exact, and the check must cover log-probs, losses, gradients
    assert rep["parity_ok"] and all(r["rel_diff"] == 0.0 for r in rep["parity"])
    assert {r["quantity"] for r in rep["parity"]} >= {"logp", "gmc loss", "grpo grad norm"}
    assert (tmp_path / "gpu_check.md").exists() and rep["sweep_seeds"] == [0]
    df = pd.read_csv(tmp_path / "dry" / "results.csv")
    assert len(df) == 4 and set(df.estimator) == {"gmc", "tic"} and set(df.d) == {0, 2}
    assert df["final_acc"].between(0, 1).all()
    assert rep["cached_seeds"] == [] and "measured in this call" in rep["train_throughput_source"]
    assert rep["train_tokens_per_s"] > 0
    # issue 38 item 11: a second call into the same folder loads the runs from the cells; it must not report
    # their step rates as measured now
    assert main(["gpu-check", "--dry-run", "--experiment-dir", str(tmp_path)]) == 0
    assert "cached" in capsys.readouterr().out
    rep = json.loads((tmp_path / "gpu_check.json").read_text())
    assert rep["cached_seeds"] == [0] and rep["train_throughput_source"].startswith("cached")
    assert rep["train_tokens_per_s"] != rep["train_tokens_per_s"]  # NaN: nothing measured in this call


def _table(gmc, others, d0=None, seeds=8, init=0.3):
    """A synthetic results table: per-seed metric of gmc and each other estimator at d=8 (and d=0)."""
    rows = []
    for s in range(seeds):
        for name, vals in {"gmc": gmc, **others}.items():
            for d, v in ((8, vals[s]), (0, (d0 or {}).get(name, [0.6] * seeds)[s])):
                rows.append({"estimator": name, "d": d, "seed": s, "auc": v, "final_acc": v, "initial_acc": init,
                             "gain": v - init, "skipped_steps": 0, "collapsed": False, "locked_in": False})
    return pd.DataFrame(rows)


def test_c9_verdict_agrees_with_its_interval():
    """Clear win → holds; clear loss → refuted; noise around the margin → inconclusive; and every
    comparison's verdict agrees with the interval printed beside it (issue 11)."""
    from simulate import verdicts as vd
    from simulate.llm.protocol import LMProtocol

    rng = np.random.default_rng(0)
    proto = LMProtocol(estimators=("onpolicy", "tic", "gmc"), degrading=("onpolicy", "tic"), delays=(0, 8))
    noise = lambda: 0.005 * rng.standard_normal(8)
    # gmc ahead of both by 0.10 at d=8; both rivals lose 0.3 from d=0 to d=8; gmc stable
    df = _table(0.6 + noise(), {"onpolicy": 0.5 + noise(), "tic": 0.5 + noise()},
                d0={"onpolicy": 0.8 + noise(), "tic": 0.8 + noise(), "gmc": 0.6 + noise()})
    r = ex.c9_result(df, proto)
    assert [c.verdict for c in r.comparisons] == [vd.HOLDS] * 4
    # 0/8 failures cannot show "stable" against p0 = 0.25 (90 % upper limit 0.31): the claim stays inconclusive
    assert [x.verdict for x in r.rates] == [vd.INCONCLUSIVE] and r.verdict == vd.INCONCLUSIVE
    assert "power 0.00" in r.lines[len(r.comparisons)]
    # gmc behind tic by 0.10: "gmc not worse than tic" is refuted, and so is the claim
    df2 = _table(0.4 + noise(), {"onpolicy": 0.3 + noise(), "tic": 0.5 + noise()},
                 d0={"onpolicy": 0.8 + noise(), "tic": 0.8 + noise(), "gmc": 0.6 + noise()})
    r2 = ex.c9_result(df2, proto)
    by = {c.name: c for c in r2.comparisons}
    assert by["gmc not worse than tic at d=8"].verdict == vd.REFUTED and r2.verdict == vd.REFUTED
    # gmc − tic spread widely around −δ: inconclusive
    df3 = _table(0.5 + 0.1 * rng.standard_normal(8), {"onpolicy": 0.3 + noise(), "tic": 0.52 + noise()})
    by3 = {c.name: c for c in ex.c9_result(df3, proto).comparisons}
    assert by3["gmc not worse than tic at d=8"].verdict == vd.INCONCLUSIVE
    # tied within noise far below the margin: "not worse" holds (it is not a claim that gmc is better)
    df5 = _table(0.5 + noise(), {"onpolicy": 0.3 + noise(), "tic": 0.5 + noise()})
    by5 = {c.name: c for c in ex.c9_result(df5, proto).comparisons}
    assert by5["gmc not worse than tic at d=8"].verdict == vd.HOLDS
    for res in (r, r2, ex.c9_result(df3, proto)):
        for c in res.comparisons:
            assert (c.verdict == vd.HOLDS) == (c.lo > c.threshold) and (c.verdict == vd.REFUTED) == (c.hi < c.threshold)
        for line, c in zip(res.lines, res.comparisons):
            assert f"[{c.lo:+.3f}, {c.hi:+.3f}]" in line and line.endswith(c.verdict)
    assert "quick: not a verdict" in ex.c9_result(df, proto, quick=True).line
    assert "quick: not a verdict" not in r.line and r.protocol_hash in r.line
    # collapsed or locked-in gmc seeds count in the stability rate (the tabular protocol's failure definition)
    df4 = df.copy()
    df4.loc[(df4.estimator == "gmc") & (df4.d == 8), "collapsed"] = [True] * 4 + [False] * 4
    df4.loc[(df4.estimator == "gmc") & (df4.d == 8), "locked_in"] = [False] * 4 + [True] * 3 + [False]
    rate = next(x for x in ex.c9_result(df4, proto).rates if x.name.startswith("gmc"))
    assert rate.failures == 7 and rate.verdict == vd.REFUTED  # Clopper–Pearson 90 %: [0.53, 0.99] > 0.25
    text = ex.table(df)
    assert "d=8" in text and "auc" in text


def test_protocol_hash_is_content_and_comparisons_are_declared():
    import dataclasses

    from simulate.llm.protocol import PROTOCOL, PROTOCOL_V3, LMProtocol

    assert PROTOCOL.content_hash() == dataclasses.replace(PROTOCOL).content_hash()
    assert LMProtocol().content_hash() == PROTOCOL_V3.content_hash() != PROTOCOL.content_hash()
    assert dataclasses.replace(PROTOCOL, margin=0.03).content_hash() != PROTOCOL.content_hash()
    assert len(PROTOCOL.seeds) >= 8 and PROTOCOL.margin == 0.02
    names = [c[0] for c in PROTOCOL.comparisons()]
    assert {f"gmc not worse than {x} at d={PROTOCOL.d_max}" for x in PROTOCOL.estimators if x != "gmc"} <= set(names)
    with pytest.raises(ValueError, match="metric"):
        LMProtocol(metric="reward")


def test_figure_quick_saves_png_pdf_and_sidecar(tmp_path):
    """The figure's whole path on a shrunk protocol (2 estimators, 2 seeds, 2 steps) to keep the test in
    seconds; the sidecar carries the verdict, the protocol hash and 'quick: not a verdict'."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    from figures import fig_llm_delay
    from simulate.llm.protocol import LMProtocol

    proto = LMProtocol(estimators=("onpolicy", "gmc"), degrading=("onpolicy",), quick_seeds=(0, 1), quick_steps=2,
                       quick_warmstart_steps=20, quick_n_eval=20, quick_n_prompts=2, eval_every=1)
    res = fig_llm_delay.main(tmp_path / "fig", quick=True, results_root=str(tmp_path / "results"),
                             sweep_opts={"backend": "serial", "progress": False}, protocol=proto)
    names = sorted(os.path.basename(f) for f in res.files)
    assert names == ["fig_llm_delay.json", "fig_llm_delay.pdf", "fig_llm_delay.png"]
    meta = json.loads((tmp_path / "fig" / "fig_llm_delay.json").read_text())
    assert meta["seeds"] == [0, 1] and "git_commit" in meta and "d=8" in meta["table"]
    assert meta["protocol_hash"] == proto.content_hash() and meta["verdict"].startswith("quick: not a verdict")
    assert "c9" not in meta and "protocol" not in meta  # those keys belong to the tabular protocol figure
    assert all(ev["claim"] == "C9" and ev["verdict"] in ("holds", "refuted", "inconclusive", "out of scope")
               for ev in meta["evidence"])
    df = pd.read_csv(tmp_path / "results" / "llm" / "fig_llm_delay_quick" / "results.csv")
    # v3: 2 seeds × 3 runs in the main arm + the step-size arm's quick seed × 3 runs
    assert len(df) == 9 and df["final_acc"].between(0, 1).all() and df["auc"].between(0, 1).all()
    assert sorted(df.groupby("lr_factor").size().items()) == [(1.0, 6), (3.0, 3)]
    assert [a["lr_factor"] for a in meta["arms"]] == [1.0, 3.0] and meta["turning_points"]
    # the report interface (issue 35): answer rows (gmc − rival, paired interval named) and the LM section
    assert [(r["group"], r["rival"], r["d"]) for r in meta["answer"]] == [("cpu-lm", "onpolicy", 8)]
    assert "quick" in meta["answer"][0]["setting"] and meta["answer"][0]["interval"] == "95 % paired t, 2 seeds"
    sec, = meta["sections"]
    assert sec["title"].startswith("LM row") and any("Perturbation check: not run (quick" in p for p in sec["paragraphs"])
    assert any(p.startswith("GPU row") for p in sec["paragraphs"]) and meta["perturbation"] is None


def test_local_checkpoint_with_its_own_tokenizer_and_chat_template(tmp_path):
    """``--model PATH``: a saved Qwen3 checkpoint with a (char-level) HF tokenizer trains offline end to end."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from simulate.llm.config import TaskConfig, WarmStartConfig
    from simulate.llm.model import build_model, load_model
    from simulate.llm.train import train

    ckpt = tmp_path / "ckpt"
    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2, **{chr(i): i - 29 for i in range(32, 127)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()  # join characters without spaces, as a BPE tokenizer's decode would
    hf = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    hf.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}:{% endif %}"
    hf.save_pretrained(ckpt)
    model = build_model("tiny", len(vocab), 0)
    model.config.max_position_embeddings = 256
    model.save_pretrained(ckpt)
    loaded, tok = load_model(str(ckpt))
    ids = tok.encode_prompt("Compute 12+34.")
    assert ids[-1] == vocab[":"] and tok.decode(tok.encode_completion("46")) == "46"  # chat template, EOS stops
    cfg = TrainConfig(model_path=str(ckpt), steps=2, n_prompts=2, G=2, eval_every=100,
                      task=TaskConfig(n_eval=4), warmstart=WarmStartConfig(steps=2, batch_size=4),
                      cache_dir=str(tmp_path / "cache"), out_dir=str(tmp_path / "run"))
    s = train(cfg, progress=False)
    assert s["steps_done"] == 2 and s["skipped_steps"] == 0
    os.remove(ckpt / "tokenizer.json")
    os.remove(ckpt / "tokenizer_config.json")
    with pytest.raises(ValueError, match="no tokenizer"):
        load_model(str(ckpt))


def test_experiment_cli_defaults_compare_like_for_like():
    """The experiment's defaults are the pre-registered protocol's (read from it, not restated)."""
    from simulate.llm.protocol import PROTOCOL

    args = build_parser().parse_args(["experiment"])
    cfg = config_from_args(args)
    assert cfg.replace(cache_dir="x") == ex.protocol_base().replace(cache_dir="x")
    assert cfg.length_normalize is True and config_from_args(build_parser().parse_args(["train"])).length_normalize is False
    assert tuple(args.estimators.split(",")) == PROTOCOL.estimators and args.seeds == len(PROTOCOL.seeds)
    args = build_parser().parse_args(["experiment", "--no-length-normalize"])
    assert config_from_args(args).length_normalize is False


def test_config_settings_round_trip():
    from simulate.llm.config import TaskConfig, WarmStartConfig

    cfg = TrainConfig(estimator="cispo", max_grad_norm=float("inf"), warmstart_seed=None, model_path=None,
                      length_normalize=True, task=TaskConfig(task="countdown", n_eval=7),
                      warmstart=WarmStartConfig(steps=3, eta=1e-2))
    s = ex.config_settings(cfg)
    assert s["task.task"] == "countdown" and s["warmstart.steps"] == 3
    assert ex.config_from_settings(s) == cfg
    from sweep import Cell

    Cell("x", s)  # the engine accepts the flattened settings (finite scalars only)


def test_experiment_runs_through_the_sweep_engine_and_resumes(tmp_path, monkeypatch):
    """Cells are stored by the engine; a second run loads them and trains nothing."""
    from simulate.llm.config import TaskConfig, WarmStartConfig
    from sweep import load_cells

    base = TrainConfig(steps=2, n_prompts=2, G=4, eval_every=100, D=2, warmstart_seed=0,
                       length_normalize=True, task=TaskConfig(n_eval=8), warmstart=WarmStartConfig(steps=3, batch_size=8),
                       cache_dir=str(tmp_path / "cache"))
    sw = ex.Sweep(estimators=("gmc", "grpo"), delays=(0, 2), seeds=(0,), base=base, out_dir=str(tmp_path / "exp"))
    df = ex.run(sw, progress=False, backend="serial")
    # one cell per seed (a forest of its runs, simulate.llm.tree), one row per run
    assert sorted(df["run_id"]) == sorted(rid for rid, _ in ex.grid(sw)) and df["length_normalize"].all()
    assert set(ex.ROW_COLUMNS) <= set(df.columns) and df["final_acc"].between(0, 1).all()
    assert len(load_cells(ex.to_sweep(sw), tmp_path / "exp" / "cells")) == 1 and list(df["cell"].unique()) == ["s0"]
    assert (tmp_path / "exp" / "runs" / "gmc-d2-s0" / "metrics.csv").exists()  # per-run metrics kept
    # the warm start is a stage of its own before the forests: one engine cell per distinct warm start
    warm = load_cells(ex.warm_start_sweep(sw), tmp_path / "exp" / "cells")
    assert len(warm) == 1 and len(ex.warm_start_sweep(dataclasses.replace(sw, seeds=(0, 1, 2))).cells) == 1
    (w,) = warm.values()
    assert 0.0 <= float(w["heldout_accuracy"].iloc[0]) <= 1.0 and w["key"].iloc[0]

    import simulate.llm.tree as tree
    import simulate.llm.warmstart as warmstart

    def boom(*a, **k):
        raise AssertionError("a cached cell was recomputed")

    monkeypatch.setattr(tree, "train_forest", boom)
    monkeypatch.setattr(warmstart, "warm_start", boom)
    again = ex.run(sw, progress=False, backend="serial")
    pd.testing.assert_frame_equal(df, again)
    cols = list(ex.ROW_COLUMNS)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "exp" / "results.csv")[cols], again[cols])
    # a changed setting is a new cell: it must be computed (and here it fails loudly, proving it ran)
    from sweep import SweepError

    with pytest.raises(SweepError, match="recomputed"):
        ex.run(ex.Sweep(estimators=("gmc",), delays=(0,), seeds=(1,), base=base, out_dir=str(tmp_path / "exp")),
               progress=False, backend="serial")


def test_accuracy_auc_is_the_trapezoid_over_the_sample_budget():
    """Evaluations after 2 and 10 updates (steps 1 and 9) and the warm start at 0: trapezoid / K."""
    m = pd.DataFrame({"step": range(10), "heldout_acc": [None, 0.4] + [None] * 7 + [0.6]})
    # x = 0, 2, 10 (uneven, so a plain mean of the points, 0.4, would differ)
    assert ex.accuracy_auc(0.2, m, 10) == pytest.approx((0.5 * (0.2 + 0.4) * 2 + 0.5 * (0.4 + 0.6) * 8) / 10)
    with pytest.raises(ValueError, match="did not finish"):
        ex.accuracy_auc(0.2, m.iloc[:6], 10)


def test_warmstart_key_changes_with_the_code_that_computes_it(monkeypatch):
    """A warm start cached by older code is never reused (a stale cache made fresh runs differ from the
    committed report, issue 11): the key hashes the sources of model, warmstart, tasks and tokenizer."""
    from simulate.llm import config

    cfg = TrainConfig()
    k0 = config.warmstart_key(cfg)
    assert config.warmstart_key(cfg.replace(estimator="tic", eta=1e-3)) == k0  # RL settings do not matter
    monkeypatch.setattr(config, "_source_hash", lambda modules: "other-code")
    assert config.warmstart_key(cfg) != k0


def test_experiment_cli_runs_the_protocol_grid_by_default(tmp_path, monkeypatch):
    """No flags: the protocol's runs (shared d=0 baseline); a changed setting: the full grid, flagged."""
    from simulate.llm.protocol import PROTOCOL

    grids = []

    def fake_run(sweep, **kw):
        grids.append(ex.grid(sweep))
        raise ValueError("stop here")

    monkeypatch.setattr(ex, "run", fake_run)
    assert main(["experiment", "--experiment-dir", str(tmp_path)]) == 2
    # v3: both arms, each with its own runs
    assert len(grids[-1]) == sum(len(seeds) * len(pairs) for (_, seeds), (_, pairs) in zip(PROTOCOL.arms(), PROTOCOL.arm_runs()))
    assert main(["experiment", "--steps", "3", "--experiment-dir", str(tmp_path)]) == 2
    assert len(grids[-1]) == len(PROTOCOL.estimators) * len(PROTOCOL.delays) * len(PROTOCOL.seeds)
