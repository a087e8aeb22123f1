"""CLI faults: negative and non-finite numbers as values, and the ``train`` command's options."""
from __future__ import annotations

import argparse

import pytest

from simulate.__main__ import build_parser, main
from simulate.commands import accept_negative_numbers
from simulate.commands import train as train_cmd


# ----------------------------------------------------------------------------- negative numbers
@pytest.mark.parametrize("values", [["-1e4"], ["1e5", "-1e5"], ["0.1", "-.5", "-3", "-2E+3"]])
def test_negative_and_scientific_values_are_values(values, capsys):
    assert main(["weights", "--estimator", "all", "--log-ratios", *values]) == 0
    out = capsys.readouterr().out
    assert f"G = {len(values)}" in out and "nan" not in out.lower()


@pytest.mark.parametrize("value", ["-inf", "-Infinity", "-nan"])
def test_non_finite_values_reach_the_validator(value, capsys):
    assert main(["weights", "--log-ratios", "0", value]) == 2  # parsed, then refused with a clear line
    err = capsys.readouterr().err
    assert err.startswith("error: log_ratios must be finite") and err.count("\n") == 1


def test_negative_eps_is_a_range_error_not_a_parse_error(capsys):
    assert main(["weights", "--eps", "-0.1", "--log-ratios", "0"]) == 2
    assert "eps must be a finite number > 0" in capsys.readouterr().err


def test_runner_fix_reaches_sub_parsers_of_any_cli():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd")
    s = sub.add_parser("go")
    s.add_argument("--x", type=float)
    s.add_argument("--ys", type=float, nargs="+")
    accept_negative_numbers(p)
    a = p.parse_args(["go", "--x", "-1e4", "--ys", "1e5", "-1e5", "-inf"])
    assert a.x == -1e4 and a.ys[:2] == [1e5, -1e5] and a.ys[2] == float("-inf")


def test_parser_with_a_numeric_option_keeps_argparse_rule():
    p = argparse.ArgumentParser()
    p.add_argument("-1", dest="one", action="store_true")
    p.add_argument("--x")
    accept_negative_numbers(p)
    assert p.parse_args(["-1"]).one is True


def test_llm_cli_gets_the_same_fix():
    llm_main = pytest.importorskip("simulate.llm.__main__")
    p = accept_negative_numbers(llm_main.build_parser())
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    assert all(s._negative_number_matcher.match("-1e4") for s in sub.choices.values())


# ----------------------------------------------------------------------------- train options
def _train_parser():
    p = argparse.ArgumentParser()
    train_cmd.add_arguments(p)
    return p


def test_train_defaults_are_the_config_defaults():
    from simulate.commands.train import EXP_INSTANCE
    from simulate.training import TrainConfig

    cfg = train_cmd.config_from(_train_parser().parse_args([]))
    assert cfg == TrainConfig(instance=EXP_INSTANCE)  # every learner and delay field: TrainConfig()'s


def test_train_help_shows_defaults(capsys):
    with pytest.raises(SystemExit) as info:
        main(["train", "--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    from simulate.training import TrainConfig

    assert f"step size η (default: {TrainConfig().eta})" in out
    assert "--delay d fixed model: the delay d of every step (default: 0)" in out
    assert "--max-delay D" in out


def test_train_options_have_one_spelling_each():
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    strings = [s for a in sub._actions for s in a.option_strings]
    assert "--d" not in strings and "--D" not in strings
    by_dest: dict = {}
    for a in sub._actions:
        if a.option_strings and not isinstance(a, argparse.BooleanOptionalAction):
            by_dest.setdefault(a.dest, []).extend(a.option_strings)
    assert {d: s for d, s in by_dest.items() if len(s) > 1} == {"help": ["-h", "--help"]}
    with pytest.raises(SystemExit):  # no abbreviations either: --del is neither --delay nor --delay-model
        sub.parse_args(["--del", "3"])


def test_uniform_delay_needs_max_delay(capsys):
    assert main(["train", "--delay-model", "uniform", "--steps", "1"]) == 2
    assert "--delay-model uniform needs --max-delay D" in capsys.readouterr().err
    cfg = train_cmd.config_from(_train_parser().parse_args(["--delay-model", "uniform", "--max-delay", "6"]))
    assert cfg.delay.kind == "uniform" and cfg.delay.D == 6 and cfg.delay.max_delay == 6


def test_fixed_delay_with_another_model_is_refused(capsys):
    assert main(["train", "--delay-model", "uniform", "--max-delay", "4", "--delay", "8"]) == 2
    assert "--delay d is the fixed model's delay" in capsys.readouterr().err


def test_queue_delay_needs_actors(capsys):
    assert main(["train", "--delay-model", "queue"]) == 2
    assert "--actors" in capsys.readouterr().err
    cfg = train_cmd.config_from(_train_parser().parse_args(["--delay-model", "queue", "--actors", "4"]))
    assert cfg.delay.n_actors == 4


def test_fixed_delay_option(capsys):
    cfg = train_cmd.config_from(_train_parser().parse_args(["--delay", "5"]))
    assert cfg.delay.kind == "fixed" and cfg.delay.d == 5


def test_unwritable_out_is_refused_before_the_run(tmp_path, capsys, monkeypatch):
    def no_run(cfg):
        raise AssertionError("training started although --out cannot be written")

    monkeypatch.setattr(train_cmd, "run_training", no_run)
    assert main(["train", "--out", str(tmp_path / "missing" / "curve.csv")]) == 2
    assert "does not exist or is not writable" in capsys.readouterr().err


def test_train_table_marks_the_final_iterate_without_a_fake_delay():
    """The last row (θ_K) has no update: its delay is missing, not −1 (issue 27 item 16)."""
    from simulate.training import TrainConfig, run_training

    df = run_training(TrainConfig(steps=4, G=4)).to_frame()
    assert df["delay"].isna().tolist() == [False] * 4 + [True] and (df["delay"].dropna() >= 0).all()
