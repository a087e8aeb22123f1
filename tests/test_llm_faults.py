"""Fault injection for the LM harness (issue 14): each test injects one fault and asserts the clear
error or the recovery, and that nothing is lost or silently wrong.

| fault                                   | expected behaviour                                      | test |
|-----------------------------------------|---------------------------------------------------------|------|
| ``--resume`` with a changed config      | refused, differing keys listed; ``--force KEYS`` accepts the named ones only | test_resume_with_changed_config_is_refused_unless_forced |
| ``--resume`` without a checkpoint       | refused; metrics file untouched                         | test_resume_without_checkpoint_is_refused_and_keeps_metrics |
| torn last metrics line (kill mid-write) | dropped with a warning, the step is redone              | test_torn_last_metrics_line_is_dropped_on_resume |
| damaged metrics line before the last    | refused, line named                                      | test_damaged_middle_metrics_line_is_refused |
| checkpoint with arbitrary pickle        | refused by ``weights_only=True``; no code runs          | test_checkpoint_with_code_is_refused_and_never_runs |
| truncated checkpoint                    | refused (cannot be recomputed)                           | test_truncated_checkpoint_is_a_clear_error |
| damaged warm-start cache                | warning naming the file, recomputed, same weights       | test_damaged_warmstart_cache_is_recomputed |
| two runs on one output folder           | second refused (``flock``); no stale lock after exit    | test_second_run_on_one_folder_is_refused |
| bad CLI values                          | one ``error:`` line naming the option, before any model | test_cli_rejects_bad_values_before_building_a_model |
| ``--delay-model uniform --delay 8``    | refused: ``d`` is the fixed model's parameter            | (same test) |
"""
from __future__ import annotations

import json
import os

import pytest
from _llm_tiny import tiny, train_tiny  # noqa: F401 (tiny is a fixture)
import torch

from simulate.llm.__main__ import main
from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig
from simulate.llm.run_files import output_lock
from simulate.llm.warmstart import warm_start


def _rows(path):
    return [json.loads(x) for x in open(path)]


def test_resume_with_changed_config_is_refused_unless_forced(tiny, tmp_path):
    cfg = tiny[0].replace(out_dir=str(tmp_path))
    train_tiny(cfg, tiny, stop_at=1)
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(ValueError, match=r"differs .* 2 key\(s\): eps: saved 0.2 -> now 0.3; eta: saved 0.001"):
        train_tiny(cfg.replace(eps=0.3, eta=2e-3), tiny, resume=True)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before  # refused before touching anything
    assert json.loads((tmp_path / "config.json").read_text())["eps"] == 0.2  # config.json not overwritten
    # --force names what it accepts: a difference it does not name is still refused (issue 27 item 11)
    with pytest.raises(ValueError, match=r"1 key\(s\): eta.*--force eta"):
        train_tiny(cfg.replace(eps=0.3, eta=2e-3), tiny, resume=True, force=("eps",))
    with pytest.raises(ValueError, match="force must name"):
        train_tiny(cfg.replace(eps=0.3), tiny, resume=True, force=True)
    with pytest.warns(UserWarning, match="--force"):
        s = train_tiny(cfg.replace(eps=0.3), tiny, resume=True, force=("eps",))
    assert s["steps_done"] == 4 and [r["step"] for r in _rows(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3]


def test_a_moved_run_folder_resumes_without_force(tiny, tmp_path):
    """The output path says where a run lives, not what it computes (issue 27 item 11)."""
    import shutil

    cfg = tiny[0].replace(out_dir=str(tmp_path / "a"))
    train_tiny(cfg, tiny, stop_at=1)
    shutil.move(str(tmp_path / "a"), str(tmp_path / "b"))
    s = train_tiny(cfg.replace(out_dir=str(tmp_path / "b")), tiny, resume=True)
    assert s["steps_done"] == 4


def test_a_new_run_refuses_a_folder_that_holds_a_run(tiny, tmp_path):
    """A second `train` into a finished run's folder replaced its metrics, checkpoint and summary with exit
    code 0 (issue 27 item 10): refused unless overwrite, and nothing is touched."""
    cfg = tiny[0].replace(out_dir=str(tmp_path))
    train_tiny(cfg, tiny)
    before = {f: (tmp_path / f).read_bytes() for f in ("metrics.jsonl", "checkpoint.pt", "summary.json")}
    with pytest.raises(ValueError, match="already holds a run.*--overwrite"):
        train_tiny(cfg.replace(eps=0.3), tiny)
    assert {f: (tmp_path / f).read_bytes() for f in before} == before
    s = train_tiny(cfg.replace(eps=0.3), tiny, overwrite=True)
    assert s["steps_done"] == 4 and json.loads((tmp_path / "config.json").read_text())["eps"] == 0.3


def test_resume_without_checkpoint_is_refused_and_keeps_metrics(tiny, tmp_path):
    cfg = tiny[0].replace(out_dir=str(tmp_path))
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "reward": 0.5}\n')
    with pytest.raises(ValueError, match="no checkpoint"):
        train_tiny(cfg, tiny, resume=True)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 0, "reward": 0.5}\n'


def test_torn_last_metrics_line_is_dropped_on_resume(tiny, tmp_path):
    full = tiny[0].replace(out_dir=str(tmp_path / "full"))
    train_tiny(full, tiny)
    cfg = tiny[0].replace(out_dir=str(tmp_path / "cut"))
    train_tiny(cfg, tiny, stop_at=1)
    with open(tmp_path / "cut" / "metrics.jsonl", "a") as f:
        f.write('{"step": 2, "version": 2, "rew')  # a kill in the middle of step 2's line
    with pytest.warns(UserWarning, match="torn last line"):
        train_tiny(cfg, tiny, resume=True)
    keys = ("step", "version", "delay", "reward", "loss", "chi2")
    a = [tuple(r[k] for k in keys) for r in _rows(tmp_path / "full" / "metrics.jsonl")]
    b = [tuple(r[k] for k in keys) for r in _rows(tmp_path / "cut" / "metrics.jsonl")]
    assert a == b and [r[0] for r in b] == [0, 1, 2, 3]  # each step once, none lost


def test_damaged_middle_metrics_line_is_refused(tiny, tmp_path):
    cfg = tiny[0].replace(out_dir=str(tmp_path))
    train_tiny(cfg, tiny, stop_at=1)
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    (tmp_path / "metrics.jsonl").write_text(lines[0][:20] + "\n" + lines[1] + "\n")
    with pytest.raises(ValueError, match="line 1 is damaged"):
        train_tiny(cfg, tiny, resume=True)


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_checkpoint_with_code_is_refused_and_never_runs(tiny, tmp_path):
    cfg = tiny[0].replace(out_dir=str(tmp_path / "run"))
    train_tiny(cfg, tiny, stop_at=1)
    ck = torch.load(tmp_path / "run" / "checkpoint.pt", weights_only=True)
    marker = str(tmp_path / "code-ran")
    ck["extra"] = _Payload(marker)
    torch.save(ck, tmp_path / "run" / "checkpoint.pt")
    with pytest.raises(ValueError, match="outside the weights-only safe set"):
        train_tiny(cfg, tiny, resume=True)
    assert not os.path.exists(marker)


def test_truncated_checkpoint_is_a_clear_error(tiny, tmp_path):
    cfg = tiny[0].replace(out_dir=str(tmp_path))
    train_tiny(cfg, tiny, stop_at=1)
    p = tmp_path / "checkpoint.pt"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    with pytest.raises(ValueError, match="damaged"):
        train_tiny(cfg, tiny, resume=True)


@pytest.mark.parametrize("damage", ["truncated", "empty", "tampered", "no-checksum"])
def test_damaged_warmstart_cache_is_recomputed(tmp_path, damage):
    import warnings

    cfg = TrainConfig(task=TaskConfig(n_eval=8), warmstart=WarmStartConfig(steps=2, batch_size=8),
                      cache_dir=str(tmp_path))
    m0, _, info = warm_start(cfg, progress=False)
    path = info["path"]
    if damage == "truncated":
        data = open(path, "rb").read()
        open(path, "wb").write(data[: len(data) // 2])
    elif damage == "empty":
        open(path, "wb").close()
    else:
        blob = torch.load(path, weights_only=True)
        if damage == "tampered":  # loads fine, wrong numbers: only the checksum can tell
            name = next(iter(blob["state_dict"]))
            blob["state_dict"][name] = blob["state_dict"][name] + 1.0
        else:
            del blob["sha256"]
        torch.save(blob, path)
    with pytest.warns(UserWarning, match=f"warm-start cache {path} is damaged"):
        m1, _, _ = warm_start(cfg, progress=False)
    s0, s1 = m0.state_dict(), m1.state_dict()
    assert all(torch.equal(s0[k], s1[k]) for k in s0)  # recomputed to the same weights (deterministic)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warm_start(cfg, progress=False)  # the rewritten cache verifies


def test_second_run_on_one_folder_is_refused(tiny, tmp_path):
    cfg = tiny[0].replace(out_dir=str(tmp_path))
    with output_lock(str(tmp_path)):
        with pytest.raises(ValueError, match="in use by another run"):
            train_tiny(cfg, tiny)
    assert not (tmp_path / "metrics.jsonl").exists()
    (tmp_path / ".lock").write_text("99999999")  # a lock file left by a killed run is not a lock
    assert train_tiny(cfg, tiny)["steps_done"] == 4


def test_cli_rejects_bad_values_before_building_a_model(tmp_path, monkeypatch, capsys):
    import simulate.llm.warmstart as ws

    def boom(*a, **k):
        raise AssertionError("a model was built before the inputs were checked")

    monkeypatch.setattr(ws, "make_policy", boom)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    (tmp_path / "file").write_text("x")
    cases = [
        (["--eps", "inf"], "eps must be a finite number > 0"),
        (["--eta", "inf"], "eta must be a finite number > 0"),
        (["--eta", "nan"], "eta must be a finite number > 0"),
        (["--steps", "0"], "steps must be an integer >= 1"),
        (["--device", "cuda"], "device 'cuda' requested but torch.cuda.is_available"),
        (["--out-dir", str(tmp_path / "file" / "out")], "out_dir .* is a file, not a directory"),
        (["--delay-model", "uniform", "--delay", "8"], "d=8 is the fixed model's parameter; delay=uniform .* uses D"),
        (["--clip-ratio-c", "0.5"], "clip_ratio_c must be a finite number > 1"),
    ]
    if os.path.isdir("/proc"):
        cases.append((["--out-dir", "/proc/llm-out"], "out_dir '/proc/llm-out' is not writable"))
    for flags, message in cases:
        for command in ("train", "warmstart"):
            code = main([command, "--cache-dir", str(tmp_path / "cache"), *flags])
            err = capsys.readouterr().err
            assert code == 2 and err.startswith("error: "), (flags, err)
            assert __import__("re").search(message, err), (flags, err)
    # an empty list is refused by the shared list check at parse time (issue 56 item 8): argparse's exit 2
    with pytest.raises(SystemExit) as ex:
        main(["experiment", "--estimators", "", "--experiment-dir", str(tmp_path / "e")])
    assert ex.value.code == 2 and "--estimators: give at least one value" in capsys.readouterr().err


def test_loss_options_are_checked_by_the_config():
    """Bad loss options are config errors naming the option (so the CLI rejects them before any model)."""
    with pytest.raises(ValueError, match="loss_agg_mode must be one of"):
        TrainConfig(estimator="grpo", loss_agg_mode="sum-of-everything")
    with pytest.raises(ValueError, match="cispo_clamp must be one of"):
        TrainConfig(estimator="cispo", cispo_clamp="sideways")
    with pytest.raises(ValueError, match="cispo_clamp applies to estimator cispo only"):
        TrainConfig(estimator="grpo", cispo_clamp="two-sided")
    assert TrainConfig(estimator="cispo", cispo_clamp="two-sided", loss_agg_mode="dapo").cispo_clamp == "two-sided"
