"""The LLM harness's command line and the GPU check's CPU dry run (seconds, tiny model)."""
from __future__ import annotations

import os

import pandas as pd
import pytest

from simulate.llm import experiment as ex
from simulate.llm.__main__ import build_parser, config_from_args, main
from simulate.llm.config import TrainConfig


def test_cli_mirrors_config_defaults():
    args = build_parser().parse_args(["train"])
    assert config_from_args(args) == TrainConfig()
    args = build_parser().parse_args(["train", "--estimator", "tic", "--delay", "3", "--group-size", "4",
                                      "--no-normalize-adv", "--model", "/some/dir"])
    cfg = config_from_args(args)
    assert (cfg.estimator, cfg.delay, cfg.group_size, cfg.model_path) == ("tic", 3, 4, "/some/dir")


def test_cli_bad_input_is_one_clear_error(capsys):
    assert main(["train", "--delay", "9", "--max-delay", "2"]) == 2
    assert "delay must be in 0..max_delay" in capsys.readouterr().err
    assert main(["train", "--model", "/definitely/not/here", "--steps", "1"]) == 2
    assert "not a directory" in capsys.readouterr().err


def test_gpu_check_dry_run_end_to_end(tmp_path, capsys):
    """The GPU script's whole path (warm start, sweep, throughput, table, C9 line) on CPU in seconds."""
    assert main(["gpu-check", "--dry-run", "--experiment-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "throughput:" in out and "tokens/s" in out and "d=0" in out and "d=2" in out and "C9" in out
    df = pd.read_csv(tmp_path / "dry" / "results.csv")
    assert len(df) == 4 and set(df.estimator) == {"gmc", "tic"} and set(df.delay) == {0, 2}
    assert df["final_acc"].between(0, 1).all()


def test_c9_verdict_reads_the_table():
    rows = []
    for seed, (g, t, i) in enumerate([(0.40, 0.30, 0.05), (0.42, 0.31, 0.04), (0.41, 0.29, 0.06)]):
        for name, acc in (("gmc", g), ("tic", t), ("is", i)):
            rows.append({"estimator": name, "delay": 8, "seed": seed, "final_acc": acc, "initial_acc": 0.3,
                         "gain": acc - 0.3, "skipped_steps": 0})
    df = pd.DataFrame(rows)
    line = ex.c9_verdict(df)
    assert line.startswith("C9 at d=8: HOLDS") and "some seed: is" in line
    df.loc[df.estimator == "tic", "final_acc"] = [0.50, 0.53, 0.51]
    r = ex.c9_result(df)
    assert r.verdict == "violated" and r.rival == "tic" and "tic significantly ahead" in r.line
    df.loc[df.estimator == "tic", "final_acc"] = [0.50, 0.32, 0.43]  # tic best by mean, lead within noise
    assert ex.c9_result(df).verdict == "inconclusive"
    df.loc[df.estimator == "tic", "final_acc"] = [0.30, 0.50, 0.30]  # gmc better by mean, not beyond noise
    assert ex.c9_result(df).verdict == "inconclusive"
    # paired gaps 0.10, 0.02, 0.06: beyond 1.96·SE (0.045) but inside t_2·SE (0.099) -> inconclusive with 3 seeds
    df.loc[df.estimator == "tic", "final_acc"] = [0.30, 0.40, 0.35]
    r = ex.c9_result(df)
    assert r.gap == pytest.approx(0.06) and 1.96 * r.se < r.gap < 4.303 * r.se and r.verdict == "inconclusive"
    df.loc[df.estimator == "gmc", "initial_acc"] = 0.9  # gmc below half its warm start: collapsed
    assert ex.c9_result(df).verdict == "violated"
    assert "d=8" in ex.table(df)


def test_figure_quick_saves_png_pdf_and_sidecar(tmp_path, monkeypatch):
    """The figure's whole path on its quick grid, shrunk further (warm start, steps, eval set) to keep the
    test in seconds; the real quick mode was measured at ~21 s from scratch on 2 cores."""
    import json

    import matplotlib

    matplotlib.use("Agg")
    from figures import fig_llm_delay

    original = fig_llm_delay.settings
    shrunk = {**original(True), "steps": 2, "warmstart_steps": 20, "n_eval": 20, "prompts_per_step": 2}
    monkeypatch.setattr(fig_llm_delay, "settings", lambda q=False: shrunk if q else original(q))
    res = fig_llm_delay.main(tmp_path / "fig", quick=True, results_root=str(tmp_path / "results"),
                             sweep_opts={"backend": "serial", "progress": False})
    names = sorted(os.path.basename(f) for f in res.files)
    assert names == ["fig_llm_delay.json", "fig_llm_delay.pdf", "fig_llm_delay.png"]
    meta = json.loads((tmp_path / "fig" / "fig_llm_delay.json").read_text())
    assert meta["seeds"] == [0] and "git_commit" in meta and "d=8" in meta["table"] and meta["c9"].startswith("C9")
    df = pd.read_csv(tmp_path / "results" / "llm" / "fig_llm_delay_quick" / "results.csv")
    assert len(df) == 4 and df["final_acc"].between(0, 1).all()


def test_plot_returns_fig_and_ax_without_saving():
    import matplotlib

    matplotlib.use("Agg")
    from figures import fig_llm_delay

    s = pd.DataFrame({"estimator": ["gmc", "gmc", "tic", "tic"], "delay": [0, 8, 0, 8], "mean": [0.3, 0.25, 0.3, 0.1],
                      "half_ci": [0.01, 0.02, 0.01, 0.05]})
    fig, ax = fig_llm_delay.plot(s, warm_start_acc=0.2)
    assert len(ax.get_lines()) >= 3 and ax.get_xlabel().startswith("delay")


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
    cfg = TrainConfig(model_path=str(ckpt), steps=2, prompts_per_step=2, group_size=2, eval_every=100,
                      task=TaskConfig(n_eval=4), warmstart=WarmStartConfig(steps=2, batch_size=4),
                      cache_dir=str(tmp_path / "cache"), out_dir=str(tmp_path / "run"))
    s = train(cfg, progress=False)
    assert s["steps_done"] == 2 and s["skipped_steps"] == 0
    os.remove(ckpt / "tokenizer.json")
    os.remove(ckpt / "tokenizer_config.json")
    with pytest.raises(ValueError, match="no tokenizer"):
        load_model(str(ckpt))


def test_experiment_cli_defaults_compare_like_for_like():
    args = build_parser().parse_args(["experiment"])
    cfg = config_from_args(args)
    assert cfg.length_normalize is True and config_from_args(build_parser().parse_args(["train"])).length_normalize is False
    assert {"gmc", "tic", "is", "onpolicy", "grpo", "cispo"} <= set(args.estimators.split(","))
    args = build_parser().parse_args(["experiment", "--no-length-normalize"])
    assert config_from_args(args).length_normalize is False


def test_config_settings_round_trip():
    from simulate.llm.config import TaskConfig, WarmStartConfig

    cfg = TrainConfig(estimator="cispo", max_grad_norm=float("inf"), warmstart_seed=None, model_path=None,
                      length_normalize=True, task=TaskConfig(task="countdown", n_eval=7),
                      warmstart=WarmStartConfig(steps=3, lr=1e-2))
    s = ex.config_settings(cfg)
    assert s["task.task"] == "countdown" and s["warmstart.steps"] == 3
    assert ex.config_from_settings(s) == cfg
    from sweep import Cell

    Cell("x", s)  # the engine accepts the flattened settings (finite scalars only)


def test_experiment_runs_through_the_sweep_engine_and_resumes(tmp_path, monkeypatch):
    """Cells are stored by the engine; a second run loads them and trains nothing."""
    from sweep import load_cells
    from simulate.llm.config import TaskConfig, WarmStartConfig

    base = TrainConfig(steps=2, prompts_per_step=2, group_size=4, eval_every=100, max_delay=2, warmstart_seed=0,
                       length_normalize=True, task=TaskConfig(n_eval=8), warmstart=WarmStartConfig(steps=3, batch_size=8),
                       cache_dir=str(tmp_path / "cache"))
    sw = ex.Sweep(estimators=("gmc", "grpo"), delays=(0, 2), seeds=(0,), base=base, out_dir=str(tmp_path / "exp"))
    df = ex.run(sw, progress=False, backend="serial")
    assert sorted(df["cell"]) == sorted(rid for rid, _ in ex.grid(sw)) and df["length_normalize"].all()
    assert set(ex.ROW_COLUMNS) <= set(df.columns) and df["final_acc"].between(0, 1).all()
    assert len(load_cells(ex.to_sweep(sw), tmp_path / "exp" / "cells")) == 4
    assert (tmp_path / "exp" / "runs" / "gmc-d2-s0" / "metrics.csv").exists()  # per-run metrics kept

    import simulate.llm.train as tr

    def boom(*a, **k):
        raise AssertionError("a cached cell was recomputed")

    monkeypatch.setattr(tr, "train", boom)
    again = ex.run(sw, progress=False, backend="serial")
    pd.testing.assert_frame_equal(df, again)
    cols = list(ex.ROW_COLUMNS)
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "exp" / "results.csv")[cols], again[cols])
    # a changed setting is a new cell: it must be computed (and here it fails loudly, proving it ran)
    from sweep import SweepError

    with pytest.raises(SweepError, match="recomputed"):
        ex.run(ex.Sweep(estimators=("gmc",), delays=(0,), seeds=(1,), base=base, out_dir=str(tmp_path / "exp")),
               progress=False, backend="serial")
