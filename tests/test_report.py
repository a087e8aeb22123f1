"""The one-screen report (issue 34): the answer table built from hand-made sidecars (with and without the optional
``answer`` key), the vocabulary and None/nan checks, the first screen and the size limit, on hand-made text, on a
report rebuilt from the committed sidecars, and on the committed figures/REPORT.md itself."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from figures.report import answer, check, lm_runs, render
from figures.report import exploratory as ex

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "figures" / "out"


def _side(tmp_path: Path, name: str, **keys) -> None:
    (tmp_path / f"{name}.json").write_text(json.dumps({"figure": name, "evidence": [], **keys}))


def _entry(group, rival, d, delta, lo, hi, setting="s", **kw):
    return dict(group=group, setting=setting, d=d, rival=rival, arm="", metric="nAUC", delta=delta, lo=lo, hi=hi,
                interval="95 % paired t, 8 seeds", n=8, **kw)


def _rep(tmp_path: Path) -> dict:
    return render.build(tmp_path, quick=False, run_checks=False, provenance={"commit": "abc", "dirty": False})


# ----------------------------------------------------------------------------- the answer table
def test_answer_table_from_the_answer_key_names_the_strongest_rival_and_ranges_over_instances(tmp_path):
    ents = [_entry("tabular", "onpolicy", 8, -0.10, -0.15, -0.05, "a"), _entry("tabular", "onpolicy", 8, 0.03, 0.01,
                                                                             0.05, "b"),
            _entry("cpu-lm", "tis", 32, 0.05, 0.01, 0.09), _entry("cpu-lm", "tic", 32, 0.02, -0.01, 0.05),
            _entry("cpu-lm", "verl_seq_tis", 32, 0.04, 0.00, 0.08), _entry("cpu-lm", "trl_seq_mask", 32, -0.03, -0.05,
                                                                           -0.01),
            _entry("user-mdp", "onpolicy", 32, 0.2, 0.1, 0.3)]
    _side(tmp_path, "figA", answer=ents)
    header, rows, note = ex.exploratory_table(_rep(tmp_path))
    by = {r[0].split(" [")[0]: dict(zip(header, r)) for r in rows}
    tab = by[answer.GROUPS["tabular"]]
    assert tab["gmc − onpolicy, d = 8"] == "−0.10 … +0.03 (↑1 ↓1 of 2)"
    assert tab["gmc − onpolicy, d = 32"] == "—"  # not measured there, said so
    lm = by[answer.GROUPS["cpu-lm"]]
    assert lm["gmc − tis/tic (stronger), d = 32"] == "+0.020 [−0.010, +0.050] (tic)"  # the rival with the larger mean
    assert lm["gmc − best peer correction, d = 32"] == "−0.030 [−0.050, −0.010] (trl_seq_mask)"
    assert by[answer.GROUPS["user-mdp"]]["gmc − onpolicy, d = 32"].startswith("+0.200")
    assert answer.GROUPS["gpu-lm"] not in by  # confirmatory groups are never in the exploratory table
    assert answer.GROUPS["toy-lm-faithful"] not in by  # an optional row appears only when reported
    assert "95 % paired t, 8 seeds" in note


def test_answer_table_is_derived_from_todays_structures_when_the_key_is_absent(tmp_path):
    proto = dict(primary=dict(eps=0.2, G=8, d=8), margin=0.02)
    c9 = dict(comparisons=[dict(instance="a", name="gmc − is (d=8, tuned η)", estimate=0.01, lo=-0.02, hi=0.04),
                           dict(instance="a", name="gmc − grpo (d=8, common η)", estimate=0.5, lo=0.4, hi=0.6)])
    rm = dict(settings=dict(primary_G=8, primary_eps=0.2), interval="95 % paired t",
              comparisons=[dict(instance="a", d=d, G=8, eps=0.2, arm="tuned", eta_factor=1.0, comparison="gmc − onpolicy",
                                estimate=-0.1, lo=-0.2, hi=-0.05, n=24) for d in (8, 32)])
    runs = [dict(estimator=e, d=32, seed=s, lr_factor=1.0, auc=a + 0.01 * s, failure="none")
            for e, a in (("gmc", 0.5), ("onpolicy", 0.2)) for s in range(4)]
    _side(tmp_path, "fig_c9_protocol", protocol=proto, c9=c9)
    _side(tmp_path, "fig_regime_map", **rm)
    _side(tmp_path, "fig_llm_delay", runs=runs)
    rep = _rep(tmp_path)
    ents = answer.entries(rep)
    assert {(e["group"], e["rival"], e["d"]) for e in ents} == {
        ("tabular", "onpolicy", 8), ("tabular", "onpolicy", 32), ("tabular", "is", 8), ("cpu-lm", "onpolicy", 32)}
    lm = next(e for e in ents if e["group"] == "cpu-lm")
    assert lm["delta"] == pytest.approx(0.3) and lm["lo"] == pytest.approx(0.3)  # paired: no spread in the difference
    lines = answer.recommendation(rep, ents)
    # no protocol-v6 sidecar: the exploratory rows never feed the headline, so nothing is recommended
    assert len(lines) == 3 and all("no recommendation" in x for x in lines), lines
    assert not any("use **" in x for x in lines)


def test_an_instance_range_never_mixes_step_size_arms(tmp_path):
    ents = [_entry("tabular", "onpolicy", 8, -0.1, -0.2, -0.05, "a", ), _entry("tabular", "onpolicy", 8, 0.1, 0.05, 0.2,
                                                                                "a")]
    ents[0]["arm"], ents[1]["arm"] = "tuned η", "common η"
    _side(tmp_path, "figA", answer=ents)
    header, rows, _ = ex.exploratory_table(_rep(tmp_path))
    tab = dict(zip(header, rows[0]))
    assert tab["gmc − onpolicy, d = 8"] == "−0.100 [−0.200, −0.050]" and "tuned η" in tab["setting"]
    ents.append(_entry("tabular", "is", 32, 0.1, 0.05, 0.2, "a"))  # d = 32 measured on the common arm only
    ents[-1]["arm"] = "common η"
    _side(tmp_path, "figA", answer=ents)
    header, rows, _ = ex.exploratory_table(_rep(tmp_path))
    assert dict(zip(header, rows[0]))["gmc − is, d = 32"] == "+0.100 [+0.050, +0.200] [common η]"


def test_answer_table_with_no_data_still_renders_and_bad_entries_name_the_field(tmp_path):
    header, rows, _ = answer.table(_rep(tmp_path))
    rivals = answer.v6_meta(_rep(tmp_path))["rivals"]
    assert header == ["gmc − rival", "tabular family", "LM-like family", "tiny LM", "LM on a GPU"]
    assert [r[0] for r in rows] == list(rivals) and all(r[1:] == ["not run"] * 4 for r in rows)
    _side(tmp_path, "figB", answer=[_entry("tabular", "onpolicy", 8, 0.1, 0.2, 0.3)])  # delta below lo
    with pytest.raises(ValueError, match="lo <= delta <= hi"):
        answer.entries(_rep(tmp_path))
    _side(tmp_path, "figB", answer=[_entry("mars", "onpolicy", 8, 0.1, 0.0, 0.3)])
    with pytest.raises(ValueError, match="group must be one of"):
        answer.entries(_rep(tmp_path))


def test_broken_lm_arm_is_out_of_scope_not_a_verdict():
    runs = [dict(estimator=e, d=d, lr_factor=3.0, failure="collapsed") for e in ("onpolicy", "gmc") for d in (0, 32)]
    runs += [dict(estimator="gmc", d=0, lr_factor=1.0, failure="none")]
    assert list(lm_runs.broken_arms({"runs": runs})) == [3.0]
    runs[0]["failure"] = "none"  # the d = 0 control learns: the arm is not broken
    assert lm_runs.broken_arms({"runs": runs}) == {}


# ----------------------------------------------------------------------------- the text checks
def test_checker_flags_undefined_verdict_words_qualifiers_and_python_leaks():
    text = ("| claim | verdict | note |\n|---|---|---|\n| C8 | holds (exact) | |\n| C9 | refuted | |\n"
            "| C5 | inconclusive (underpowered) | |\n| C1 | holds, bound loose ×5.5 | exact identity |\n\n"
            "value None and nan here\n")
    got = check.problems(text)
    assert "undefined verdict word 'holds (exact)'" in got
    assert "undefined verdict word 'inconclusive (underpowered)'" in got
    assert sum("leaked" in p for p in got) == 2
    assert not any(p.startswith("undefined") and ("refuted" in p or "×5.5" in p) for p in got)
    assert check.problems("| sub-claim | a | aggregate |\n|---|---|---|\n| x | holds | out of scope |\n") == []
    assert check.problems("| sub-claim | a |\n|---|---|\n| x | fine |\n") == ["undefined verdict word 'fine'"]


def test_first_screen_and_size_checks():
    good = "# t\n\n| gmc − rival | tabular family, d = 8 |\n|---|---|\n\nour reconstruction … not the paper\n"
    assert check.first_screen_problems(good) == []
    assert len(check.first_screen_problems("\n" * 61 + good)) == 2
    assert check.size_problems("x" * 40_000) == [] and check.size_problems("é" * 20_001) != []


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """The report rebuilt from the committed sidecars (no figure re-run, no sympy)."""
    if not (OUT / "fig_c9_protocol.json").exists():
        pytest.fail("figures/out lacks the committed sidecars")
    p = tmp_path_factory.mktemp("rep") / "REPORT.md"
    md, _, rep = render.write(OUT, p, run_checks=False, provenance={"commit": "abc", "dirty": False})
    return md.read_text(), md.with_name("REPORT-details.md").read_text(), rep


def test_report_from_the_committed_sidecars_passes_every_check(rebuilt):
    text, details, rep = rebuilt
    assert check.problems(text) == [] and check.problems(details) == []
    assert check.first_screen_problems(text) == [] and check.size_problems(text) == []
    head = text.splitlines()[:60]
    rivals = answer.v6_meta(rep)["rivals"]
    rows = [line for line in head if line.startswith("| ") and line.split(" | ")[0][2:] in rivals]
    assert len(rows) == len(rivals)  # one row per rival of v6's set, on the first screen
    assert any(line.startswith("| gmc − rival |") and line.rstrip(" |").endswith("LM on a GPU") for line in head)
    assert all(line.rstrip(" |").endswith("not run") for line in rows)  # no GPU results: said so in every row
    assert sum(line.startswith("- ") for line in head) >= 3  # the headline's three lines


def test_the_committed_report_passes_every_check():
    """figures/REPORT.md as committed (regenerated by `make run`): fails on a report written before issue 34."""
    text = (REPO / "figures" / "REPORT.md").read_text()
    bad = check.problems(text) + check.first_screen_problems(text) + check.size_problems(text)
    assert not bad, f"{len(bad)} problems, e.g. {bad[:3]}: regenerate with `make run`"


def test_a_renamed_figures_stale_sidecar_is_ignored_once_the_new_one_exists(tmp_path):
    from figures.report.data import load_sidecars

    _side(tmp_path, "fig7_delay")
    assert [m["figure"] for m in load_sidecars(tmp_path)] == ["fig7_delay"]  # today's committed name still read
    _side(tmp_path, "fig5_delay")
    assert [m["figure"] for m in load_sidecars(tmp_path)] == ["fig5_delay"]


def test_provenance_names_the_estimator_plugins_a_figure_ran_with(tmp_path):
    """Issue 38 item 2: a plugin's source hash travels from the sidecar into the report's first line."""
    from figures import common

    assert "estimator_plugins" in common.sidecar("x", quick=True, settings={}, seeds=[])
    _side(tmp_path, "fig_x", estimator_plugins={"my_plugin": "ab" * 32})

    def head():
        md, _, _ = render.write(tmp_path, tmp_path / "R.md", run_checks=False)
        return md.read_text().splitlines()[:6]

    assert any("`my_plugin@abababababab`" in line for line in head())
    _side(tmp_path, "fig_x")  # built-ins only: no plugin clause
    assert not any("estimator plugins" in line for line in head())


# ----------------------------------------------------------------------------- protocol v6 on the first screen (issue 53)
def _v6_side(tmp_path, ents, rivals=("onpolicy", "tis"), delays=(0, 8, 32)):
    meta = dict(name="training-claims-v6", label="training-claims-v6@x", rivals=list(rivals), delays=list(delays),
                primary_arm="tuned", families={"tabular": ["tabular-1", "tabular-2"], "lm-like": ["lm-like-3"]})
    _side(tmp_path, "fig_protocol_v6", answer=ents, v6=meta)


def _fam(group, rival, d, delta, lo, hi, arm="tuned η"):
    return dict(group=group, setting="s", d=d, rival=rival, arm=arm, metric="nAUC IQM", delta=delta, lo=lo, hi=hi,
                poi=0.5, poi_lo=0.4, poi_hi=0.6, interval="95 % stratified bootstrap", n=48)


def test_headline_names_the_rival_that_beats_gmc_and_the_table_fills_every_rival(tmp_path):
    ents = [_fam(g, r, d, 0.0, -0.01, 0.01) for g in ("tabular-family", "lm-like-family") for r in ("onpolicy", "tis")
            for d in (0, 8, 32)]
    ents = [e for e in ents if not (e["group"] == "lm-like-family" and e["rival"] == "tis" and e["d"] == 8)]
    ents.append(_fam("lm-like-family", "tis", 8, -0.08, -0.12, -0.04))
    ents.append(_fam("lm-like-family", "tis", 8, 0.3, 0.2, 0.4, arm="common η"))  # the other arm never decides
    _v6_side(tmp_path, ents)
    rep = _rep(tmp_path)
    lines = answer.recommendation(rep)
    assert lines[0].startswith("Tabular family (v6, 2 drawn") and "use **gmc**" in lines[0]
    assert "use **tis**, not gmc" in lines[1] and "d = 8 by +0.080 [+0.040, +0.120]" in lines[1]
    assert "Tiny LM" in lines[2] and "no recommendation" in lines[2]
    assert all(len(x) <= 200 for x in lines)
    header, rows, note = answer.table(rep)
    assert header[1:4] == ["tabular family, d = 0", "tabular family, d = 8", "tabular family, d = 32"]
    assert header[-1] == "LM on a GPU" and all(r[-1] == "not run" for r in rows)
    tis = dict(zip(header, rows[1]))
    assert tis["LM-like family, d = 8"] == "−0.080 [−0.120, −0.040]; P 0.50 [0.40, 0.60]"
    assert "95 % stratified bootstrap" in note


def test_a_rival_missing_at_one_delay_gives_no_recommendation_and_says_not_measured(tmp_path):
    ents = [_fam("tabular-family", r, d, 0.1, 0.05, 0.15) for r in ("onpolicy", "tis") for d in (0, 8, 32)
            if (r, d) != ("tis", 32)]
    _v6_side(tmp_path, ents)
    rep = _rep(tmp_path)
    assert "not measured: tis → no recommendation" in answer.recommendation(rep)[0]
    header, rows, _ = answer.table(rep)
    assert dict(zip(header, rows[1]))["tabular family, d = 32"] == "not measured"


def test_an_lm_like_instance_never_lands_in_the_tabular_row(tmp_path):
    # an older regime-map sidecar filed the LM-faithful toy under "tabular" (issue 53 item 1)
    ents = [_entry("tabular", "onpolicy", 32, -0.1, -0.2, -0.05, "count-frac"),
            _entry("tabular", "onpolicy", 32, 0.35, 0.3, 0.4, "lm-faithful-exact")]
    _side(tmp_path, "fig_regime_map", answer=ents)
    got = {(e["group"], e["setting"]) for e in answer.entries(_rep(tmp_path))}
    assert got == {("tabular", "count-frac"), ("toy-lm-faithful", "lm-faithful-exact")}
    header, rows, _ = ex.exploratory_table(_rep(tmp_path))
    tab = next(r for r in rows if r[0].startswith(answer.GROUPS["tabular"]))
    assert dict(zip(header, tab))["gmc − onpolicy, d = 32"] == "−0.100 [−0.200, −0.050]"


def test_regime_map_line_counts_after_benjamini_hochberg(tmp_path):
    # 20 cells: one strongly ahead, 5 barely ahead (p ≈ 0.04 each alone), 14 null: BH at q = 0.05 keeps the strong one
    # only (rank 6 of 20 needs p ≤ 0.015)
    def cell(inst, f, est, lo, hi):
        return dict(instance=inst, d=8, G=8, eps=0.2, eta_factor=f, comparison="gmc − onpolicy", estimate=est, lo=lo,
                    hi=hi, n=24)

    cs = [cell("a", 1.0, 0.5, 0.45, 0.55)] + [cell("b", float(i), 0.011, 0.0005, 0.0215) for i in range(1, 6)]
    cs += [cell("c", float(i), 0.001, -0.02, 0.022) for i in range(1, 15)]
    _side(tmp_path, "fig_regime_map", comparisons=cs, settings=dict(instances=["a", "b", "c"], delays=[8]))
    line = ex.regime_line(_rep(tmp_path))
    assert "ahead of onpolicy in 1 cells and behind in 0 (before the correction: ahead in 6)" in line
    assert "a: ↑1 ↓0 of 1; b: ↑0 ↓0 of 5; c: ↑0 ↓0 of 14" in line


def test_a_single_makers_head_names_every_protocol_it_ran():
    """The head of a report made in one run names the C5/C9 protocol, v6 and the LM protocol (issue 53: the report
    carries v6's hash), each once, and the LM protocol comes from the sidecar's ``lm_protocol`` + ``protocol_hash``."""
    from figures.report import data, render

    metas = [{"figure": "fig_c9_protocol", "git_commit": "a" * 40, "code_version": "c0de",
              "protocol": {"name": "training-claims-v5", "sha256": "5" * 64}},
             {"figure": "fig_protocol_v6", "git_commit": "a" * 40, "code_version": "c0de",
              "v6": {"name": "training-claims-v6", "sha256": "6" * 64}},
             {"figure": "fig_llm_delay", "git_commit": "a" * 40, "code_version": "c0de",
              "lm_protocol": {"name": "lm-c9", "version": 8}, "protocol_hash": "8" * 16}]
    rep = {"provenance": {"commit": "a" * 40, "dirty": False}, "stamps": data.stamps(metas), "quick": False,
           "created": "2026-12-07", "code_version": "c0de", "rebuilt_by": {"code": "c0de"},
           "protocol": metas[0]["protocol"]}
    head = render._head(rep)[0][1]
    assert head.startswith("Generated by")
    for name, h in (("training-claims-v5", "5"), ("training-claims-v6", "6"), ("lm-c9-v8", "8")):
        assert head.count(f"protocol `{name}@{h * 12}`") == 1, head
