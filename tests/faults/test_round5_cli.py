"""Issue 56 items 8 and 12: a comma-list option with a repeated value is refused when the command line is parsed,
by one shared check that names the option (asyncgrpo.validation.parse_list); `simulate protocol` says clearly what
is wrong with a missing --protocol file, an unwritable --out and an --instance-file JSON with a repeated key."""
from __future__ import annotations

import json
import re

import pytest

from asyncgrpo.validation import check_unique, parse_list


def _simulate(argv):
    from simulate.__main__ import build_parser
    from simulate.commands import run_cli

    return run_cli(build_parser(), argv)


def _llm(argv):
    from simulate.llm.__main__ import main

    return main(argv)


def _figures(argv):
    from figures.__main__ import main

    return main(argv)


def test_parse_list_names_the_option_and_the_repeated_value():
    assert parse_list("4, 16,64", "--G", int) == [4, 16, 64]
    for text, conv, rep in (("4,4", int, "[4]"), ("4,04", int, "[4]"), ("0.2,0.20", float, "[0.2]"), ("a,b,a", str, "['a']")):
        with pytest.raises(ValueError, match=r"^--opt: each value once; repeated " + re.escape(rep)):
            parse_list(text, "--opt", conv)
    with pytest.raises(ValueError, match="--opt: expected a comma list of integers"):
        parse_list("1,x", "--opt", int, "integers")
    with pytest.raises(ValueError, match="--opt: give at least one value"):
        parse_list(" , ", "--opt")
    assert check_unique((1, 2), "--x") == [1, 2]


# every comma-list option of the command lines, with a repeated value: (runner, argv, option)
# every comma-list option of the command lines, with a repeated value: (runner, argv, option). Each argv also holds an
# input a later check refuses (--n-groups 1, --seeds 0, --steps 0, an unknown figure), so that without the list check
# the command still stops at once (exit 2, another message) instead of running.
REPEATS = [
    (_simulate, ["bias", "--G", "4,4", "--n-groups", "1"], "--G"),
    (_simulate, ["bias", "--eps", "0.2,0.2", "--n-groups", "1"], "--eps"),
    (_simulate, ["bias", "--delay", "0,2,0", "--n-groups", "1"], "--delay"),
    (_simulate, ["bias", "--estimators", "gmc,gmc", "--n-groups", "1"], "--estimators"),
    (_simulate, ["bias", "--quantities", "sq_norm,sq_norm", "--n-groups", "1"], "--quantities"),
    (_simulate, ["weights", "--estimator", "gmc,gmc", "--log-ratios", "0", "1"], "--estimator"),
    (_simulate, ["protocol", "--instance", "count-frac,count-frac", "--protocol", "/nonexistent.toml"], "--instance"),
    (_llm, ["experiment", "--delays", "0,0", "--seeds", "0"], "--delays"),
    (_llm, ["experiment", "--estimators", "gmc,gmc", "--seeds", "0"], "--estimators"),
    (_llm, ["train", "--force", "steps,steps", "--steps", "0"], "--force"),
    (_figures, ["--only", "nofig,nofig"], "--only"),
    (_figures, ["--only", "nofig2", "--skip", "nofig,nofig"], "--skip"),
]


@pytest.mark.parametrize("run,argv,option", REPEATS, ids=[f"{a[0]}-{o}" for _, a, o in REPEATS])
def test_a_repeated_list_value_is_refused_naming_the_option(run, argv, option, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written; if it were, not into the repository
    try:
        rc = run(argv)
    except SystemExit as e:  # argparse: refused while parsing
        rc = e.code
    err = capsys.readouterr().err
    assert rc == 2, err
    assert f"{option}: each value once; repeated" in err or (f"argument {option}: each value once; repeated" in err)
    assert list(tmp_path.iterdir()) == []


def test_protocol_with_a_missing_file_is_one_clear_error(capsys, tmp_path):
    assert _simulate(["protocol", "--protocol", str(tmp_path / "missing.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --protocol {tmp_path / 'missing.toml'}: no such file") and "Traceback" not in err
    (tmp_path / "bad.toml").write_text("x = [\n")
    assert _simulate(["protocol", "--protocol", str(tmp_path / "bad.toml")]) == 2
    assert "not valid TOML" in capsys.readouterr().err


def test_protocol_with_an_unwritable_out_is_one_clear_error(capsys, tmp_path):
    (tmp_path / "file").write_text("")
    for out in ("/proc/x", str(tmp_path / "file" / "sub")):
        assert _simulate(["protocol", "--quick", "--instance", "count-frac", "--out", out]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --out {out}: cannot write CSV files there"), err


def test_an_instance_file_with_a_repeated_key_names_the_key(capsys, tmp_path):
    p = tmp_path / "mdp.json"
    p.write_text('{"next_state": [[[0, 0]]], "reward": [0.0], "s0": 0, "reward": [1.0]}')
    assert _simulate(["protocol", "--quick", "--instance-file", str(p)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --instance-file {p}") and "'reward' is given twice" in err
    nested = tmp_path / "nested.json"
    nested.write_text(json.dumps({"next_state": [[[0, 0]]], "reward": [0.0], "s0": 0})[:-1] + ', "name": "a", "name": "b"}')
    assert _simulate(["protocol", "--quick", "--instance-file", str(nested)]) == 2
    assert "'name' is given twice" in capsys.readouterr().err
