"""Issue 38's LM items: nothing replaced without asking, a forced resume says what it trained with, the
GPU check labels cached throughput, and no module of ``simulate`` imports ``bench`` (the upward import)."""
from __future__ import annotations

import ast
import json
import pathlib

import pandas as pd
import pytest
from _llm_tiny import tiny, train_tiny  # noqa: F401 (tiny is a fixture)

from simulate.llm import experiment as ex
from simulate.llm.config import TaskConfig, TrainConfig, WarmStartConfig

REPO = pathlib.Path(__file__).resolve().parents[1]


def _base(tmp_path, **kw) -> TrainConfig:
    return TrainConfig(steps=2, n_prompts=2, G=4, eval_every=100, D=2, warmstart_seed=0, length_normalize=True,
                       task=TaskConfig(n_eval=8), warmstart=WarmStartConfig(steps=3, batch_size=8),
                       cache_dir=str(tmp_path / "cache"), **kw)


def test_experiment_dir_with_other_settings_is_refused_without_overwrite(tmp_path):
    """Issue 38 item 4: a rerun with other flags into the same --experiment-dir replaced run folders and
    results.csv silently (results.csv said 8 steps, config.json 12). Now refused, unless --overwrite; the
    same settings (and other seeds of them) still reuse the folder."""
    out = str(tmp_path / "exp")
    sw = ex.Sweep(estimators=("gmc",), delays=(0, 2), seeds=(0,), base=_base(tmp_path), out_dir=out)
    ex.run(sw, progress=False, backend="serial")
    ex.run(ex.Sweep(estimators=("gmc",), delays=(0, 2), seeds=(1,), base=_base(tmp_path), out_dir=out),
           progress=False, backend="serial")  # other seeds, same settings: fine
    before = (tmp_path / "exp" / "results.csv").read_bytes()
    other = ex.Sweep(estimators=("gmc",), delays=(0, 2), seeds=(0,), base=_base(tmp_path).replace(steps=3), out_dir=out)
    with pytest.raises(ValueError, match=r"other settings \(steps: 2 -> 3\).*--overwrite"):
        ex.run(other, progress=False, backend="serial")
    assert (tmp_path / "exp" / "results.csv").read_bytes() == before  # refused before touching anything
    df = ex.run(other, progress=False, backend="serial", overwrite=True)
    assert (df["steps"] == 3).all()
    cfg = json.loads((tmp_path / "exp" / "runs" / "gmc-d2-s0" / "config.json").read_text())
    assert cfg["steps"] == 3 and (pd.read_csv(tmp_path / "exp" / "results.csv")["steps"] == 3).all()


def test_experiment_cli_refuses_other_flags_into_one_dir(tmp_path, capsys):
    from simulate.llm.__main__ import main

    common = ["experiment", "--experiment-dir", str(tmp_path / "e"), "--estimators", "gmc", "--delays", "0,1",
              "--seeds", "1", "--n-prompts", "2", "--G", "4", "--n-eval", "8", "--warmstart-steps", "3",
              "--warmstart-batch-size", "8", "--cache-dir", str(tmp_path / "c"), "--backend", "serial"]
    assert main(common + ["--steps", "2"]) == 0
    capsys.readouterr()
    assert main(common + ["--steps", "3"]) == 2
    assert "other settings" in capsys.readouterr().err
    assert main(common + ["--steps", "3", "--overwrite"]) == 0


def test_forced_resume_records_which_steps_used_which_value(tiny, tmp_path):
    """Issue 38 item 26: `--resume --eta 0.001 --force eta` on a finished run rewrote config.json to a value
    no step used. Now a finished run's config.json is left as it is; a resume that trains records its steps
    and the forced change, and every metrics row carries the step size it used."""
    cfg = tiny[0].replace(out_dir=str(tmp_path))
    train_tiny(cfg, tiny)
    before = (tmp_path / "config.json").read_bytes()
    with pytest.warns(UserWarning, match="nothing to train"):
        train_tiny(cfg.replace(eta=2e-3), tiny, resume=True, force=("eta",))
    assert (tmp_path / "config.json").read_bytes() == before
    assert json.loads(before)["eta"] == 1e-3

    run = tmp_path / "r"
    cfg = tiny[0].replace(out_dir=str(run))
    train_tiny(cfg, tiny, stop_at=1)
    with pytest.warns(UserWarning, match="--force"):
        train_tiny(cfg.replace(eta=2e-3), tiny, resume=True, force=("eta",))
    saved = json.loads((run / "config.json").read_text())
    assert saved["resume_history"] == [{"first_step": 2, "last_step": 3,
                                        "changed": {"eta": {"before": 1e-3, "after": 2e-3}}}]
    rows = [json.loads(x) for x in open(run / "metrics.jsonl")]
    assert [r["lr"] for r in rows] == [1e-3, 1e-3, 2e-3, 2e-3]


def test_warmup_steps_ramp_the_step_size():
    from simulate.llm.train import step_size

    cfg = TrainConfig(eta=1e-3, warmup_steps=4)
    assert [step_size(cfg, v) for v in range(6)] == pytest.approx([2.5e-4, 5e-4, 7.5e-4, 1e-3, 1e-3, 1e-3])
    assert step_size(cfg.replace(warmup_steps=0), 0) == 1e-3
    with pytest.raises(ValueError, match="warmup_steps"):
        TrainConfig(warmup_steps=-1)


def _imports(path: pathlib.Path) -> set[str]:
    mods = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            mods |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            mods.add(node.module)
    return mods


def test_simulate_never_imports_bench():
    """Issue 38 (the house): simulate/llm/gpu_check.py imported bench/bench_llm.py, an import running
    upward (bench measures simulate, not the other way round). The shared measurement is
    simulate/llm/throughput.py, imported by both."""
    upward = {str(p.relative_to(REPO)): m for p in (REPO / "simulate").rglob("*.py") for m in _imports(p)
              if m == "bench" or m.startswith("bench.")}
    assert upward == {}
    assert "simulate.llm.throughput" in _imports(REPO / "bench" / "bench_llm.py")
