"""Issue 57 item 7: the three losses at the top level, where users look for them, and in README's tour."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import asyncgrpo

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_the_three_losses_are_importable_from_asyncgrpo():
    from asyncgrpo import policy_loss, trl_policy_loss, verl_policy_loss
    from asyncgrpo.estimators.maps.trl_loss_config import trl_policy_loss as trl
    from asyncgrpo.estimators.token_level import policy_loss as pl
    from asyncgrpo.integrations._peer_verl import verl_policy_loss as verl

    assert (policy_loss, verl_policy_loss, trl_policy_loss) == (pl, verl, trl)
    assert {"policy_loss", "verl_policy_loss", "trl_policy_loss"} <= set(asyncgrpo.__all__) & set(dir(asyncgrpo))


def test_importing_them_needs_neither_verl_nor_trl():
    code = ("import sys, asyncgrpo; asyncgrpo.policy_loss, asyncgrpo.verl_policy_loss, asyncgrpo.trl_policy_loss; "
            "print(sorted(m for m in ('verl', 'trl') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_readme_tour_names_them():
    tour = README.split("## Ten lines of Python", 1)[1].split("\n## ", 1)[0]
    imports = [line for line in tour.splitlines() if line.startswith("from asyncgrpo import ")]
    for name in ("policy_loss", "verl_policy_loss", "trl_policy_loss"):
        assert f"{name}(" in tour and any(name in line.split("#")[0] for line in imports), name
