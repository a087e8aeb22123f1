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
    assert line.startswith("C9 at d=8: HOLDS") and "beyond" in line and "unstable: is" in line
    df.loc[df.estimator == "tic", "final_acc"] = 0.5
    assert "NOT SUPPORTED" in ex.c9_verdict(df)
    assert "d=8" in ex.table(df)
