"""The README's first end-to-end command: ``python -m simulate weights``."""
from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

from simulate.__main__ import main


def test_weights_command_prints_correct_gmc_weights(capsys):
    assert main(["weights", "--estimator", "gmc", "--eps", "0.2", "--log-ratios", "0.1", "-0.3", "2.0"]) == 0
    out = capsys.readouterr().out
    rho = np.exp([0.1, -0.3, 2.0])
    rho_bar = rho.mean()
    expected = rho * min(1.0, 1.2 / rho_bar)
    line = next(l for l in out.splitlines() if l.startswith("gmc"))
    printed = [float(x) for x in re.findall(r"\[(.*)\]", line)[0].split()]
    np.testing.assert_allclose(printed, expected, rtol=1e-5)
    assert f"{rho_bar:.6g}" in out
    removed = float(line.split()[3])
    assert math.isclose(removed, rho_bar - 1.2, rel_tol=1e-5)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--estimator", "ppo", "--log-ratios", "0.1"], "unknown estimator 'ppo'"),
        (["--eps", "0", "--log-ratios", "0.1"], "eps must be a finite number > 0"),
        (["--log-ratios", "nan"], "log_ratios must be finite"),
    ],
)
def test_weights_command_rejects_bad_input(argv, message, capsys):
    assert main(["weights", *argv]) == 2
    assert message in capsys.readouterr().err


def test_module_entry_point_runs_as_a_subprocess():
    res = subprocess.run([sys.executable, "-m", "simulate", "weights", "--estimator", "all", "--log-ratios", "0", "1"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert all(name in res.stdout for name in ("onpolicy", "tis", "tic", "gmc", "snis"))


def test_weights_command_at_the_edge_of_the_range(capsys):
    """ℓ = (−1e4, 0): ρ = (0, 1) to float64; onpolicy removes ρ̄ − 1 = −0.5, snis has 𝔅 = 0.5."""
    assert main(["weights", "--estimator", "all", "--log-ratios", "-1e4", "0"]) == 0
    rows = {l.split()[0]: l.split() for l in capsys.readouterr().out.splitlines() if l.split()[:1]}
    assert float(rows["onpolicy"][3]) == -0.5 and rows["onpolicy"][4] == "inf"  # 𝔅 ≈ e^1e4/2: past float64
    assert float(rows["snis"][3]) == -0.5 and float(rows["snis"][4]) == 0.5
    assert all(float(rows[n][3]) == 0.0 for n in ("is", "tis", "tic", "gmc"))
