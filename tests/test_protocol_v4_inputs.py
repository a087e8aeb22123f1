"""Issue 38 (protocol inputs) and issue 34 (the protocol on one's own MDP): every input that would silently
change a verdict is refused up front, with an error naming its field; a malformed instance file is refused
with a message naming the file and the key."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

from simulate.__main__ import main as cli
from simulate.commands.protocol import load_instance_file
from simulate.protocol import load_protocol, run_protocol
from simulate.protocol.spec import DEFAULT_PATH

V4_TEXT = DEFAULT_PATH.read_text(encoding="utf-8")


def _sub(pattern: str, repl: str, text: str = V4_TEXT) -> str:
    out, n = re.subn(pattern, repl, text, count=1, flags=re.M)
    assert n == 1, pattern  # the edit must hit the committed file, or the case tests nothing
    return out


@pytest.mark.parametrize("pattern, repl, field", [
    (r"^window_delta = 0\.02", "window_delta = -1", "window_delta"),
    (r"^neighbour_step_log2 = 0\.5", "neighbour_step_log2 = -0.5", "neighbour_step_log2"),
    (r"^neighbour_step_log2 = 0\.5", "neighbour_step_log2 = 0", "neighbour_step_log2"),
    (r"^tune_seeds = \[0, 1,", "tune_seeds = [-1, 1,", "tune_seeds"),
    (r"^eval_seeds = \[1000,", "eval_seeds = [4294967296,", "eval_seeds"),
    (r"^eta_log2 = \[1\.0, 5\.0\]", "eta_log2 = [1, 1e300]", "eta_log2"),
    (r"^delays = \[0, 8\]", "delays = [0, 8, 8]", "delays"),
    (r"^delays = \[0, 8\]", "delays = [0, 2.5]", "delays"),
    (r"^G = \[8\]", "G = [8, 8]", "G"),
    (r"^n_prompts = 1", "n_prompts = 3", "n_prompts"),
    (r"^budget = 2048", "budget = 2049", "budget"),
    (r'^estimators = \["onpolicy", ', "estimators = [", "estimators"),
    (r'^instances = \["count-frac", ', 'instances = ["count-frac", "no-such-instance", ', "instances"),
    (r'^instances = \["count-frac", ', 'instances = ["count-frac", "count-frac", ', "instances"),
    (r"^zero_tol = 1e-9", "zero_tol = -1e-9", "zero_tol"),
    (r'^eta_rule = "lcb"', 'eta_rule = "max"', "eta_rule"),
    (r"^heldout_margin = 0\.05", "heldout_margin = nan", "heldout_margin"),
    (r"^sensitivity_step_log2 = -0\.5", "sensitivity_step_log2 = 0.5", "sensitivity_step_log2"),
    (r"^c5_G = \[2, 8, 32\]", "c5_G = 8", "quick.c5_G"),
    (r"^c5_G = \[2, 8, 32\]", "c5_G = [2, 2.5]", "quick.c5_G"),
    (r"^eval_seeds = \[1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007\]", "eval_seeds = [1000, 1000]", "eval_seeds"),
    (r'^test_b = "retired"', 'test_b = "later"', "c5.test_b"),
])
def test_protocol_file_is_validated_whole_at_load_and_names_the_field(tmp_path, pattern, repl, field):
    """Each case is refused by load_protocol without quick — [quick] included — and the message names the
    field (seen failing: window_delta's error named "margin", [quick] was checked only in quick mode,
    neighbour_step_log2 ≤ 0, seeds out of range and a 1e300 grid edge loaded, a protocol without onpolicy
    and an unknown or repeated instance ran)."""
    f = tmp_path / "p.toml"
    f.write_text(_sub(pattern, repl))
    with pytest.raises(ValueError, match=re.escape(field)):
        load_protocol(f)


def test_quick_table_must_be_a_table(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(V4_TEXT.replace("[quick]", "[quick_unused]").replace("name = ", "quick = 5\nname = ", 1))
    with pytest.raises(ValueError, match="protocol field quick"):
        load_protocol(f)


def test_unknown_or_repeated_instance_is_refused_before_any_cell(tmp_path):
    """run_protocol checks the whole instance list before computing anything (seen failing: an unknown name
    failed only after the valid instances' cells; a repeat doubled n)."""
    with pytest.raises(ValueError, match="unknown"):
        run_protocol(quick=True, instances=["count-frac", "no-such"], root=tmp_path)
    with pytest.raises(ValueError, match="must not repeat"):
        run_protocol(quick=True, instances=["count-frac", "count-frac"], root=tmp_path)
    assert not any(tmp_path.iterdir())  # nothing was computed or stored


def test_cli_refuses_a_repeated_instance(capsys):
    assert cli(["protocol", "--quick", "--instance", "prev-random-1,prev-random-1"]) == 2
    assert "repeated ['prev-random-1']" in capsys.readouterr().err


# ----------------------------------------------------------------------------- --instance-file (issue 34)
def _mdp_arrays():
    from simulate.instances import token_mdp

    m = token_mdp(3, 4, state="prev", reward="sum_mod", m=3, seed=0)
    return dict(next_state=m.next_state, reward=m.reward, s0=np.int64(m.s0))


@pytest.mark.parametrize("edit, msg", [
    (lambda d: d.pop("reward"), r"lacks \['reward'\]"),
    (lambda d: d.update(rewards=d["reward"]), r"unknown key\(s\) \['rewards'\]"),
    (lambda d: d.update(next_state=d["next_state"][0]), "next_state must be an array of integers with 3"),
    (lambda d: d.update(next_state=d["next_state"] + 0.5), "next_state must be an array of integers"),
    (lambda d: d.update(s0=np.float64(0.5)), "s0 must be one integer"),
    (lambda d: d.update(reward=d["reward"] * 3), r"reward must lie in \[0, 1\]"),
    (lambda d: d.update(reward=d["reward"][:-1]), "reward"),
    (lambda d: d.update(bernoulli=np.int64(2)), "bernoulli must be true or false"),
])
def test_malformed_instance_file_is_refused_with_a_clear_error(tmp_path, capsys, edit, msg):
    d = _mdp_arrays()
    edit(d)
    f = tmp_path / "mine.npz"
    np.savez(f, **d)
    with pytest.raises(ValueError, match=msg) as e:
        load_instance_file(f)
    assert str(f) in str(e.value)
    assert cli(["protocol", "--quick", "--instance-file", str(f)]) == 2  # one error line, exit 2
    err = capsys.readouterr().err
    assert err.startswith("error: --instance-file") and "Traceback" not in err


def test_instance_file_json_and_suffix(tmp_path):
    d = {k: np.asarray(v).tolist() for k, v in _mdp_arrays().items()}
    f = tmp_path / "mine.json"
    f.write_text(json.dumps(dict(d, name="mine", bernoulli=True)))
    inst = load_instance_file(f)
    assert inst.name == "mine" and inst.bernoulli and inst.T == 4
    (tmp_path / "mine.csv").write_text("x")
    with pytest.raises(ValueError, match="must end in .npz or .json"):
        load_instance_file(tmp_path / "mine.csv")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON must be an object"):
        load_instance_file(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="no such file"):
        load_instance_file(tmp_path / "absent.npz")


@pytest.mark.slow
def test_cli_runs_the_protocol_on_a_users_file(tmp_path, capsys):
    """The whole path on a tiny protocol: the file's instance is trained and judged (in-process)."""
    np.savez(tmp_path / "mine.npz", **_mdp_arrays(), name=np.str_("mine"))
    tiny = _sub(r"^budget = 2048", "budget = 128")
    tiny = _sub(r'^estimators = \[.*?\]\n', 'estimators = ["onpolicy", "is", "tis", "tic", "gmc"]\n',
                re.sub(r'^(estimators = \[[^\]]*)\n\s+("verl[^\]]*\])', r"\1 \2", tiny, flags=re.M))
    tiny = _sub(r"^eval_seeds = \[1000, 1001, 1002, 1003, 1004, 1005, 1006, 1007\]", "eval_seeds = [1000, 1001]", tiny)
    tiny = _sub(r"^tune_seeds = \[0, 1, 2, 3\]", "tune_seeds = [0, 1]", tiny)
    tiny = _sub(r"^eta_log2 = \[2\.0, 5\.0\]", "eta_log2 = [2.0, 3.0]", tiny)
    (tmp_path / "p.toml").write_text(tiny)
    rc = cli(["protocol", "--quick", "--protocol", str(tmp_path / "p.toml"), "--instance-file",
              str(tmp_path / "mine.npz"), "--no-progress", "--cells", str(tmp_path / "cells")])
    out = capsys.readouterr().out
    assert rc == 0 and "mine" in out and "C9 aggregate" in out
