"""The practitioner's "my delay" answer (figures/report/for_delay.py, issue 58) on hand-made sidecars."""
import json

import pytest

from figures.report.for_delay import for_delay


def _write(tmp_path, advice=True):
    meta = dict(label="training-claims-v6@x", rivals=["onpolicy", "tis"], delays=[0, 8, 32], primary_arm="tuned")
    ents = [dict(group=g, rival=r, d=d, arm="tuned η", delta=-0.1 if (r, d) == ("tis", 32) else 0.0,
                 lo=-0.2 if (r, d) == ("tis", 32) else -0.01, hi=-0.05 if (r, d) == ("tis", 32) else 0.01,
                 poi=0.5, poi_lo=0.4, poi_hi=0.6)
            for g in ("tabular-family", "lm-like-family") for r in ("onpolicy", "tis") for d in (0, 8, 32)]
    (tmp_path / "fig_protocol_v6.json").write_text(json.dumps(dict(v6=meta, answer=ents)))
    if advice:
        rows = [dict(d=d, mode="budget", estimator="gmc", eps=0.1, G=4, K=128, eta_median=16.0, iqm=0.78, lo=0.77,
                     hi=0.79) for d in (8, 32)]
        (tmp_path / "fig_eps_G_advice.json").write_text(json.dumps(dict(advice=rows)))


def test_nearest_delay_rule_and_rivals(tmp_path):
    _write(tmp_path)
    lines = for_delay(20, tmp_path)
    assert lines[0].startswith("your delay d = 20 → the nearest measured d = 8")  # |20−8| < |20−32|
    assert "use **tis**, not gmc" in lines[1]  # the headline rule over every delay, not only the nearest
    assert any(line.startswith("ε, G, η at d = 8") for line in lines)
    assert for_delay(40, tmp_path)[0].endswith("nearest measured d = 32 (training-claims-v6@x, tuned η)")
    assert "gmc − tis" in "\n".join(for_delay(40, tmp_path))


def test_missing_sidecars_are_said_and_bad_delays_refused(tmp_path):
    assert "not in" in for_delay(8, tmp_path)[0]
    _write(tmp_path, advice=False)
    assert "advice sidecar is not in" in for_delay(8, tmp_path)[-1]
    for bad in (-1, 2.5, True):
        with pytest.raises(ValueError, match="d must be an integer"):
            for_delay(bad, tmp_path)
