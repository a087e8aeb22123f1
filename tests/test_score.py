"""``simulate score`` (issue 58): a map scored on a tiny version-6 protocol against gmc and a rival set, through the
same cells, aggregates and headline rule as the report; a plugin map through the command line (slow)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from simulate.protocol.families import family_seeds
from simulate.protocol.spec import V6_PATH

REPO = Path(__file__).resolve().parents[1]


def tiny_protocol(tmp_path: Path, estimators=("onpolicy", "tis", "gmc"), rivals=("onpolicy", "tis")) -> Path:
    """v6's rules on one tabular draw, 2 tuning and 3 evaluation seeds, 8 steps, d ∈ {0, 8}."""
    text = V6_PATH.read_text().split("[quick]")[0]
    inst = f"tabular-{family_seeds('score-test', 'tabular', 1)[0]}"
    subs = {
        'family_root = "asyncgrpo/training-claims-v6/2026-12-07"': 'family_root = "score-test"',
        "families = { tabular = 6, lm-like = 6 }": "families = { tabular = 1 }",
        "family_budget = { tabular = 1024, lm-like = 512 }": "family_budget = { tabular = 64 }",
        'name = "training-claims-v6"': 'name = "score-test"',
        "delays = [0, 8, 32]": "delays = [0, 8]",
        "eta_log2 = [0.0, 6.0]": "eta_log2 = [1.0, 3.0]",
        "max_widen = 4": "max_widen = 1",
    }
    for a, b in subs.items():
        assert a in text, a
        text = text.replace(a, b)
    import re

    text = re.sub(r"(?ms)^instances = \[.*?\]", f'instances = ["{inst}"]', text)
    text = re.sub(r"(?ms)^estimators = \[.*?\]", "estimators = [" + ", ".join(f'"{e}"' for e in estimators) + "]", text)
    text = re.sub(r"(?ms)^eps_estimators = \[.*?\]", "eps_estimators = [" + ", ".join(
        f'"{e}"' for e in estimators if e in ("tis", "tic", "gmc")) + "]", text)
    text = re.sub(r"(?ms)^rivals = \[.*?\]", "rivals = [" + ", ".join(f'"{e}"' for e in rivals) + "]", text)
    text = re.sub(r"(?ms)^tune_seeds = \[.*?\]", "tune_seeds = [600000, 600001]", text)
    text = re.sub(r"(?ms)^eval_seeds = \[.*?\]", "eval_seeds = [610000, 610001, 610002]", text)
    p = tmp_path / "tiny-v6.toml"
    p.write_text(text)
    return p


def test_score_writes_a_scorecard_judged_by_the_headline_rule(tmp_path):
    from simulate.score import score

    md = score("snis", protocol=tiny_protocol(tmp_path), out=tmp_path / "out", root=str(tmp_path / "cells"),
               backend="serial", progress=False)
    text = md.read_text()
    assert md.name == "scorecard-snis.md" and (tmp_path / "out" / "scorecard-snis.png").stat().st_size > 1000
    assert "# Staleness scorecard: `snis`" in text and "score-test@" in text
    verdict = text.split("## Verdict")[1].split("##")[0]
    assert "tabular family (1 drawn)" in verdict and ("use **snis**" in verdict or "not snis" in verdict)
    table = text.split("## snis − each rival")[1].split("## Property kit")[0]
    for r in ("gmc", "onpolicy", "tis"):
        assert f"| {r} | " in table
    assert sum(line.count("; P ") for line in table.splitlines() if line.startswith("| ")) == 3 * 2  # every rival, every d
    assert "| w_le_rho | refuted |" in text  # the property kit ran: snis (ρ_i/ρ̄) is not in 𝒲_ε
    # d = 0: every trajectory map is onpolicy exactly (ρ = 1), so the difference is 0 with no spread
    row = next(line for line in table.splitlines() if line.startswith("| onpolicy |"))
    assert row.split(" | ")[1].startswith("+0.000 [+0.000, +0.000]")


def test_score_refuses_an_unregistered_name_and_an_old_protocol(tmp_path):
    from simulate.score import score

    with pytest.raises(ValueError, match="registered by naming its module"):
        score("no_such_map", protocol=tiny_protocol(tmp_path))
    with pytest.raises(ValueError, match="version-6 file"):
        score("snis", protocol=V6_PATH.with_name("protocol-v5.toml"))


@pytest.mark.slow  # a plugin changes every kernel's cache key: a fresh compile in the child (~2 min on 2 cores)
def test_score_command_loads_a_plugin_map(tmp_path):
    from tests._plugin_source import SOUND_TRAJECTORY

    (tmp_path / "myplug.py").write_text(SOUND_TRAJECTORY + '''
MAPS = (Estimator("mytis", "trajectory", lw, lw_nb, lw_torch, in_class=True, doc="tis again"),)
''')
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}", "MPLBACKEND": "Agg"}
    proc = subprocess.run([sys.executable, "-m", "simulate", "score", "--estimator", "myplug:mytis", "--protocol",
                           str(tiny_protocol(tmp_path)), "--out", str(tmp_path / "out"), "--cells",
                           str(tmp_path / "cells"), "--workers", "1", "--no-progress"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert (tmp_path / "out" / "scorecard-mytis.md").exists()
