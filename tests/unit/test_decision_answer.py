"""The report's first screen and its exploratory appendix (figures/report/answer.py) on small synthetic reports:
entry validation, the rows derived from C9 / the regime map / the LM runs, the cells and their text, the v6 table,
the headline settings, and the regime line with Benjamini–Hochberg (issue 55; docs/protocol.md)."""
import math

import numpy as np
import pytest
from scipy import stats

from figures.report import answer as an
from figures.report import exploratory as ex
from figures.report import lm_runs

PEERS = ("verl_seq_tis", "trl_seq_mask")
V6 = dict(name="training-claims-v6", label="v6@abc", rivals=["onpolicy", "tis"], delays=[8, 32], primary_arm="tuned",
          families={"tabular": ["tabular-1", "tabular-2"], "lm-like": []})


class _Inst:
    def __init__(self, group):
        self.report_group = group


_REGISTRY = {"count-frac": "tabular", "prev-random-1": "tabular", "lm-faithful-exact": "toy-lm-faithful"}


@pytest.fixture(autouse=True)
def small_registry(monkeypatch):
    """The registered instances as a small fake (building the real ones takes seconds: each test runs per mutant)."""
    import simulate.protocol.instances as inst

    monkeypatch.setattr(inst, "INSTANCES", tuple(_REGISTRY))
    monkeypatch.setattr(inst, "get_instance", lambda name: _Inst(_REGISTRY[name]))


def ent(group="tabular", setting="count-frac", d=8, rival="onpolicy", delta=0.1, lo=0.05, hi=0.15, **kw):
    return dict(group=group, setting=setting, d=d, rival=rival, delta=delta, lo=lo, hi=hi, **kw)


def rep(**kw):
    base = dict(sidecars=[])
    base.update(kw)
    return base


# --- check_entry --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["group", "setting", "d", "rival", "delta", "lo", "hi"])
def test_check_entry_names_a_missing_field(key):
    e = ent()
    del e[key]
    with pytest.raises(ValueError, match=f"figX: entry lacks {key!r}"):
        an.check_entry(e, "figX")


def test_check_entry_refuses_an_unknown_group():
    with pytest.raises(ValueError, match="answer: group must be one of tabular-family"):
        an.check_entry(ent(group="toy"))


@pytest.mark.parametrize("d", [-1, 8.0, True, "8", None])
def test_check_entry_refuses_a_bad_delay(d):
    with pytest.raises(ValueError, match="d must be an integer >= 0"):
        an.check_entry(ent(d=d))


@pytest.mark.parametrize("k", ["delta", "lo", "hi"])
@pytest.mark.parametrize("v", [math.nan, math.inf, None, True, "0.1"])
def test_check_entry_refuses_non_finite_numbers(k, v):
    e = ent()
    e[k] = v
    with pytest.raises(ValueError, match=f"{k} must be a finite number"):
        an.check_entry(e)


@pytest.mark.parametrize("lo,delta,hi", [(0.2, 0.1, 0.3), (0.0, 0.4, 0.3)])
def test_check_entry_refuses_an_unordered_interval(lo, delta, hi):
    with pytest.raises(ValueError, match="need lo <= delta <= hi"):
        an.check_entry(ent(lo=lo, delta=delta, hi=hi))


def test_check_entry_accepts_d_zero_and_closed_bounds():
    e = ent(d=0, lo=0.1, delta=0.1, hi=0.1)
    assert an.check_entry(e) is e


# --- instance groups, regrouping, entries -----------------------------------------------------------------------

def test_instance_groups_from_the_registry_and_the_protocol_sidecar():
    g = an.instance_groups(rep(protocol=dict(instance_groups={"mine": "lm-like", "count-frac": "toy-lm-faithful"})))
    assert g["lm-faithful-exact"] == "toy-lm-faithful" and g["mine"] == "lm-like"
    assert g["count-frac"] == "toy-lm-faithful"  # the sidecar overrides the registry
    assert an.instance_groups(rep())["count-frac"] == "tabular"


def test_regroup_moves_only_tabular_entries_of_a_non_tabular_instance_to_a_known_group():
    groups = {"lm-faithful-exact": "toy-lm-faithful", "x": "lm-like", "count-frac": "tabular"}
    assert an._regroup(ent(setting="lm-faithful-exact"), groups)["group"] == "toy-lm-faithful"
    assert an._regroup(ent(setting="x"), groups)["group"] == "tabular"  # "lm-like" is no answer group
    assert an._regroup(ent(setting="count-frac"), groups)["group"] == "tabular"
    assert an._regroup(ent(setting="unknown"), groups)["group"] == "tabular"
    e = ent(group="toy-ladder", setting="lm-faithful-exact")
    assert an._regroup(e, groups)["group"] == "toy-ladder"
    orig = ent(setting="lm-faithful-exact")
    an._regroup(orig, groups)
    assert orig["group"] == "tabular"  # a copy is moved, not the sidecar's dict


def test_entries_checks_sidecar_rows_by_figure_name():
    bad = rep(sidecars=[dict(figure="fig_bad", answer=[ent(lo=0.5)])])
    with pytest.raises(ValueError, match="fig_bad: need lo <= delta <= hi"):
        an.entries(bad)


def _c9(name, inst="count-frac", est=0.1, lo=0.0, hi=0.2, n=24):
    return dict(name=name, instance=inst, estimate=est, lo=lo, hi=hi, n=n)


def test_entries_given_rows_first_derived_rows_only_where_no_sidecar_reports_them():
    given = ent(rival="tis", d=8, arm="tuned η", delta=0.3, lo=0.2, hi=0.4)
    r = rep(sidecars=[dict(figure="f", answer=[given]), dict(figure="g")], protocol=dict(primary=dict(d=8)),
            c9=dict(comparisons=[_c9("gmc − tis (d=8, tuned η)", est=-0.1, lo=-0.2, hi=0.0),
                                 _c9("gmc − is (d=8, tuned η)")]))
    out = an.entries(r)
    assert out[0] == given and len(out) == 2
    assert out[1]["rival"] == "is" and out[1]["delta"] == 0.1


def _lm_runs(rivals=("onpolicy", "tis"), seeds=(0, 1, 2), d=(8, 32)):
    runs = []
    for dd in d:
        for s in seeds:
            runs.append(dict(estimator="gmc", d=dd, seed=s, auc=0.5 + 0.01 * s, lr_factor=1.0, failure="none"))
            for k, r in enumerate(rivals):
                runs.append(dict(estimator=r, d=dd, seed=s, auc=0.4 - 0.1 * k + 0.02 * s * s, failure="none"))
    return runs


def test_entries_lm_rows_from_a_sidecar_replace_all_derived_lm_rows():
    lm = ent(group="cpu-lm", setting="tiny", rival="grpo", d=8)
    r = rep(sidecars=[dict(figure="f", answer=[lm])], lm_meta=dict(runs=_lm_runs()))
    out = an.entries(r)
    assert out == [lm]
    r = rep(sidecars=[], lm_meta=dict(runs=_lm_runs()))
    assert {e["rival"] for e in an.entries(r)} == {"onpolicy", "tis"}


# --- derive_tabular -------------------------------------------------------------------------------------------------

def _rm(**kw):
    c = dict(comparison="gmc − onpolicy", arm="tuned", d=8, G=8, eps=0.2, instance="count-frac", estimate=0.1,
             lo=0.05, hi=0.15, n=24, eta_factor=1.0)
    c.update(kw)
    return c


def test_derive_tabular_takes_regime_map_cells_at_the_primary_G_eps_arm_and_delays():
    rm = dict(settings=dict(primary_G=8, primary_eps=0.2), interval="IV",
              comparisons=[_rm(), _rm(d=32, estimate=0.2, lo=0.1, hi=0.3), _rm(d=4), _rm(d=0), _rm(G=4), _rm(eps=0.5),
                           _rm(arm="common"), _rm(comparison="gmc − is"), _rm(estimate=math.nan),
                           _rm(lo=None), _rm(hi=math.inf), _rm(eps=0.2 + 1e-9)])
    out = an.derive_tabular(rep(regime_map=rm, protocol=dict(instance_groups={"count-frac": "tabular"})))
    assert [(e["d"], e["delta"]) for e in out] == [(8, 0.1), (32, 0.2)]
    e = out[0]
    assert e == dict(group="tabular", setting="count-frac", d=8, rival="onpolicy", arm="tuned η", metric="nAUC",
                     delta=0.1, lo=0.05, hi=0.15, n=24, interval="gmc − onpolicy: IV")


def test_derive_tabular_without_primary_settings_takes_every_G_and_eps_and_the_default_interval():
    rm = dict(comparisons=[_rm(G=4, eps=0.5, eta_factor=2.0)])
    out = an.derive_tabular(rep(regime_map=rm))
    assert len(out) == 1 and out[0]["interval"] == "gmc − onpolicy: 95 % paired t over the held-out seeds"
    rm = dict(settings=dict(primary_G=8, primary_eps=0.2), comparisons=[_rm(eps=0.2 + 1e-13)])
    assert len(an.derive_tabular(rep(regime_map=rm))) == 1


def test_derive_tabular_files_an_instance_under_its_protocol_group():
    rm = dict(comparisons=[_rm(instance="lm-faithful-exact")])
    r = rep(regime_map=rm, protocol=dict(instance_groups={"lm-faithful-exact": "toy-lm-faithful"}))
    assert an.derive_tabular(r)[0]["group"] == "toy-lm-faithful"


def test_derive_tabular_c9_rows_at_the_primary_delay_only_and_not_twice_for_onpolicy():
    c9 = dict(comparisons=[
        _c9("gmc − tis (d=8, tuned η)", est=-0.1, lo=-0.2, hi=-0.05),
        _c9("gmc − tis (d=32, tuned η)"),               # not the primary d
        _c9("gmc − grpo (d=8, common η)"),              # not the tuned arm
        _c9("gmc − is (d=8, tuned η)", est=math.nan),   # not finite
        _c9("gmc − onpolicy (d=8, tuned η)", est=0.9, lo=0.8, hi=1.0),  # the regime map has it
        _c9("gmc − onpolicy (d=8, tuned η)", inst="prev-random-1", est=0.7, lo=0.6, hi=0.8),
        _c9("x gmc − tic (d=8, tuned η)"),
        dict(instance="count-frac", estimate=0.1, lo=0.0, hi=0.2),  # no name
    ])
    r = rep(c9=c9, protocol=dict(primary=dict(d=8), instance_groups={"prev-random-1": "toy-ladder"}),
            regime_map=dict(comparisons=[_rm()]))
    out = an.derive_tabular(r)
    assert [(e["setting"], e["rival"], e["delta"]) for e in out] == [
        ("count-frac", "onpolicy", 0.1), ("count-frac", "tis", -0.1), ("prev-random-1", "onpolicy", 0.7)]
    tis = out[1]
    assert tis == dict(group="tabular", setting="count-frac", d=8, rival="tis", arm="tuned η", metric="nAUC",
                       delta=-0.1, lo=-0.2, hi=-0.05, n=24,
                       interval="other rivals (d = 8): paired t at the comparison's Holm level (protocol C9), "
                                "held-out seeds")
    assert out[2]["group"] == "toy-ladder"


def test_derive_tabular_of_an_empty_report_is_empty():
    assert an.derive_tabular(rep()) == []


# --- derive_lm -------------------------------------------------------------------------------------------------------

def test_derive_lm_pairs_seeds_and_uses_the_95_t_interval_at_the_base_step_size():
    runs = _lm_runs(seeds=(0, 1, 2))
    runs += [dict(estimator="tis", d=8, seed=s, auc=0.0, lr_factor=0.5) for s in range(3)]  # another arm: ignored
    runs += [dict(estimator="tis", d=8, seed=9, auc=0.3)]                                  # gmc has no seed 9
    runs += [dict(estimator="gmc", d=8, seed=7, auc=math.nan)]                            # non-finite: dropped
    out = an.derive_lm(rep(lm_meta=dict(runs=runs)))
    assert [(e["d"], e["rival"]) for e in out] == [(8, "onpolicy"), (8, "tis"), (32, "onpolicy"), (32, "tis")]
    e = out[1]
    diff = np.array([(0.5 + 0.01 * s) - (0.3 + 0.02 * s * s) for s in range(3)])
    m, lo, hi = stats.t.interval(0.95, 2, loc=diff.mean(), scale=stats.sem(diff))[0], None, None
    assert e["delta"] == pytest.approx(diff.mean())
    assert (e["lo"], e["hi"]) == pytest.approx(stats.t.interval(0.95, 2, loc=diff.mean(), scale=stats.sem(diff)))
    assert e["n"] == 3 and e["group"] == "cpu-lm" and e["setting"] == "tiny LM, 2-digit sums" and e["arm"] == ""
    assert e["metric"] == "accuracy AUC" and e["interval"] == "95 % paired t over 3 seeds"


def test_derive_lm_needs_two_paired_seeds():
    assert an.derive_lm(rep(lm_meta=dict(runs=_lm_runs(seeds=(0,))))) == []
    assert len(an.derive_lm(rep(lm_meta=dict(runs=_lm_runs(seeds=(0, 1), rivals=("is",)))))) == 2
    assert an.derive_lm(rep()) == []


# --- columns, cells, cell text, arms ---------------------------------------------------------------------------------

@pytest.mark.parametrize("rival,col", [("tis", "tis/tic"), ("tic", "tis/tic"), ("onpolicy", "onpolicy"), ("is", "is"),
                                       ("grpo", "grpo"), ("verl_seq_tis", "best peer"), ("snis", None)])
def test_column_of_each_rival(rival, col):
    assert ex._column(rival, PEERS) == col


def test_cells_keep_the_strongest_rival_of_a_class_per_setting_and_arm():
    es = [ent(rival="tis", delta=0.2, lo=0.1, hi=0.3), ent(rival="tic", delta=-0.1, lo=-0.2, hi=0.0),
          ent(rival="tis", setting="b", delta=0.3, lo=0.2, hi=0.4), ent(rival="tic", arm="common η", delta=0.5),
          ent(rival="snis"), ent(rival="onpolicy", d=32)]
    cs = ex.cells(es, PEERS)
    assert sorted(cs) == [("tabular", "onpolicy", 32), ("tabular", "tis/tic", 8)]
    got = {(e["setting"], e.get("arm", ""), e["rival"]) for e in cs[("tabular", "tis/tic", 8)]}
    assert got == {("count-frac", "", "tic"), ("b", "", "tis"), ("count-frac", "common η", "tic")}


def test_cells_keep_the_first_of_equal_rivals():
    es = [ent(rival="tis", delta=0.1), ent(rival="tic", delta=0.1)]
    assert ex.cells(es, PEERS)[("tabular", "tis/tic", 8)][0]["rival"] == "tis"


def test_cells_default_peers_are_the_registered_ones():
    cs = ex.cells([ent(rival="trl_seq_mask")])
    assert ("tabular", "best peer", 8) in cs


def test_cell_text_one_setting_and_class_columns_name_the_rival():
    e = ent(rival="tis", delta=0.252, lo=0.223, hi=0.281)
    assert ex.cell_text([e], "tis/tic") == "+0.252 [+0.223, +0.281] (tis)"
    assert ex.cell_text([e], "best peer") == "+0.252 [+0.223, +0.281] (tis)"
    assert ex.cell_text([ent(delta=-0.1, lo=-0.2, hi=0.0)], "onpolicy") == "−0.100 [−0.200, +0.000]"
    assert ex.cell_text(None, "is") == "—" and ex.cell_text([], "is") == "—"


def test_cell_text_several_settings_show_the_range_and_strict_counts():
    es = [ent(delta=-0.13, lo=-0.2, hi=-0.01), ent(delta=-0.04, lo=-0.1, hi=0.0), ent(delta=0.02, lo=0.0, hi=0.05),
          ent(delta=0.2, lo=0.01, hi=0.3)]
    assert ex.cell_text(es, "onpolicy") == "−0.13 … +0.20 (↑1 ↓1 of 4)"


def test_one_arm_prefers_tuned_else_the_first_arm_per_cell():
    es = [ent(arm="common η", delta=0.9), ent(arm="tuned η"), ent(d=32, arm="common η"), ent(d=32, arm="x η"),
          ent(rival="is")]
    out = ex.one_arm(es, PEERS)
    assert [(e["d"], e.get("arm", ""), e["rival"]) for e in out] == [(8, "tuned η", "onpolicy"), (32, "common η", "onpolicy"),
                                                                     (8, "", "is")]


def test_main_arm_of_a_group():
    es = [ent(arm="common η"), ent(arm="tuned η"), ent(group="cpu-lm", arm="")]
    assert ex._main_arm(es, "tabular") == "tuned η"
    assert ex._main_arm(es[:1], "tabular") == "common η"
    assert ex._main_arm(es, "cpu-lm") == ""
    assert ex._main_arm(es, "gpu-lm") == ""


# --- exploratory table ------------------------------------------------------------------------------------------------

def test_exploratory_table_rows_for_non_confirmatory_groups_only_in_group_order():
    es = [ent(group="cpu-lm", setting="tiny", metric="accuracy AUC", arm="", interval="95 % paired t over 3 seeds"),
          ent(metric="nAUC", arm="tuned η", interval="IV-tab", delta=0.1, lo=0.05, hi=0.15),
          ent(rival="is", d=32, arm="common η", metric="nAUC", delta=-0.3, lo=-0.4, hi=-0.2),
          ent(group="tabular-family", setting="tabular-1", metric="nAUC IQM", arm="tuned η")]
    header, rows, note = ex.exploratory_table(rep(), es)
    assert header[0] == "setting" and header[1] == "gmc − onpolicy, d = 8" and header[2] == "gmc − onpolicy, d = 32"
    assert header[-1] == "gmc − best peer correction, d = 32" and len(header) == 1 + 2 * len(ex.COLUMNS)
    assert [r[0] for r in rows] == ["tabular softmax instances (toy MDPs) [nAUC, tuned η]",
                                    "tiny LM on CPU (2-digit sums) [accuracy AUC]"]
    assert rows[0][1] == "+0.100 [+0.050, +0.150]" and rows[0][2] == "—"
    assert rows[0][4] == "−0.300 [−0.400, −0.200] [common η]"  # the is column at d = 32, on another arm
    assert "Intervals: tabular softmax instances: IV-tab; tiny LM on CPU: 95 % paired t over 3 seeds." in note
    assert "never feed the headline" in note and "tis/tic and best peer (verl_seq_tis" in note


def test_exploratory_table_row_label_without_metric_or_arm():
    header, rows, _ = ex.exploratory_table(rep(), [ent(group="toy-ladder", arm="")])
    assert rows[0][0] == "LM-faithful toy on the ladder (rung 6, exploratory)"
    assert ex.exploratory_table(rep(), [])[1] == []


# --- v6 meta, arms, confirmatory ------------------------------------------------------------------------------------

def test_v6_meta_from_a_sidecar_else_from_the_registered_file():
    assert an.v6_meta(rep(sidecars=[dict(figure="a"), dict(figure="b", v6=V6), dict(figure="c", v6={"x": 1})])) is V6
    m = an.v6_meta(rep())
    assert m["name"] == "training-claims-v6" and m["primary_arm"] == "tuned" and m["families"] == {}
    assert m["rivals"][0] == "onpolicy" and m["delays"] == [0, 8, 32] and m["label"].startswith("training-claims-v6@")


@pytest.mark.parametrize("arm,word", [("tuned", "tuned η"), ("common", "common η"), ("other", "tuned η"), (None, "tuned η")])
def test_arm_word(arm, word):
    assert an._arm_word({} if arm is None else dict(primary_arm=arm)) == word


def test_confirmatory_keeps_the_primary_arm_and_armless_rows_of_the_group():
    es = [ent(group="tabular-family", arm="tuned η"), ent(group="tabular-family", arm="common η"),
          ent(group="tabular-family"), ent(group="lm-like-family", arm="tuned η")]
    assert an.confirmatory(es, V6, "tabular-family") == [es[0], es[2]]
    assert an.confirmatory(es, dict(V6, primary_arm="common"), "tabular-family") == [es[1], es[2]]


# --- headline settings and recommendation -----------------------------------------------------------------------------

def _v6ents():
    out = []
    for g in ("tabular-family", "lm-like-family"):
        for r in ("onpolicy", "tis"):
            for d in (8, 32):
                out.append(ent(group=g, setting=g, rival=r, d=d, arm="tuned η", delta=0.1, lo=0.05, hi=0.15))
    return out


def test_headline_settings_labels_entries_and_delays():
    es = _v6ents() + [ent(group="cpu-lm", setting="tiny", confirmatory=True), ent(group="cpu-lm", setting="tiny2")]
    out = an.headline_settings(rep(sidecars=[dict(figure="f", v6=V6)]), es)
    assert [x[0] for x in out] == ["Tabular family (v6, 2 drawn, nAUC IQM, tuned η)",
                                   "LM-like family (v6, ? drawn, nAUC IQM, tuned η)", "Tiny LM on CPU (LM v8, fresh seeds)"]
    assert all(x[2] == (8, 32) for x in out)
    assert len(out[0][1]) == 4 and {e["group"] for e in out[0][1]} == {"tabular-family"}
    assert [e["setting"] for e in out[2][1]] == ["tiny"]


def test_recommendation_applies_the_headline_rule_per_setting():
    es = _v6ents()
    es[-1] = dict(es[-1], delta=-0.2, lo=-0.3, hi=-0.1)  # lm-like: tis beats gmc at d = 32
    out = an.recommendation(rep(sidecars=[dict(figure="f", v6=V6)]), es)
    assert len(out) == 3
    assert out[0] == ("Tabular family (v6, 2 drawn, nAUC IQM, tuned η): use **gmc**: not significantly behind any of "
                      "2 rivals at d ∈ {8, 32}; ahead of 2.")
    assert out[1].startswith("LM-like family (v6, ? drawn, nAUC IQM, tuned η): use **tis**, not gmc: it beats gmc at "
                             "d = 32 by +0.200 [+0.100, +0.300]")
    assert out[2] == ("Tiny LM on CPU (LM v8, fresh seeds): not run under LM protocol v8 (fresh seeds; earlier LM "
                      "versions are exploratory: appendix) → no recommendation.")


def test_recommendation_without_results_is_not_run():
    out = an.recommendation(rep(sidecars=[dict(figure="f", v6=V6)]), [])
    assert out[0].endswith("not run: no results yet → no recommendation.")


# --- the first table --------------------------------------------------------------------------------------------------

def test_cell_of_the_first_table():
    assert an._cell(None) == "not measured"
    assert an._cell(ent(delta=0.1, lo=0.05, hi=0.15)) == "+0.100 [+0.050, +0.150]"
    e = ent(delta=0.1, lo=0.05, hi=0.15, poi=0.625, poi_lo=0.55, poi_hi=0.7)
    assert an._cell(e) == "+0.100 [+0.050, +0.150]; P 0.62 [0.55, 0.70]" or \
        an._cell(e) == "+0.100 [+0.050, +0.150]; P 0.63 [0.55, 0.70]"
    assert an._cell(dict(e, poi=math.nan)) == "+0.100 [+0.050, +0.150]"


def test_table_one_row_per_rival_columns_per_measured_setting_and_delay():
    es = [e for e in _v6ents() if e["group"] == "tabular-family"]
    es = [e for e in es if not (e["rival"] == "tis" and e["d"] == 32)]
    es[0] = dict(es[0], interval="IVX")
    header, rows, note = an.table(rep(sidecars=[dict(figure="f", v6=V6)]), es)
    assert header == ["gmc − rival", "tabular family, d = 8", "tabular family, d = 32", "LM-like family", "tiny LM",
                      "LM on a GPU"]
    assert rows[0] == ["onpolicy", "+0.100 [+0.050, +0.150]", "+0.100 [+0.050, +0.150]", "not run", "not run", "not run"]
    assert rows[1] == ["tis", "+0.100 [+0.050, +0.150]", "not measured", "not run", "not run", "not run"]
    assert note.startswith("Protocol `v6@abc` (confirmatory: instances drawn by seed, fresh seeds), tuned η.")
    assert "intervals: IVX, over the" in note


def test_table_default_interval_and_label_fallback_to_name():
    meta = {k: v for k, v in V6.items() if k != "label"}
    header, rows, note = an.table(rep(sidecars=[dict(figure="f", v6=meta)]), [])
    assert header == ["gmc − rival", "tabular family", "LM-like family", "tiny LM", "LM on a GPU"]
    assert rows == [["onpolicy", "not run", "not run", "not run", "not run"],
                    ["tis", "not run", "not run", "not run", "not run"]]
    assert "Protocol `training-claims-v6`" in note and "intervals: 95 % stratified bootstrap percentile interval," in note


# --- the regime line (Benjamini–Hochberg within the map) ---------------------------------------------------------------

def _cell_with_p(p, est_sign=1.0, n=10, inst="count-frac", d=8, G=8, eps=0.2, eta=1.0):
    """A regime-map cell whose paired-t interval gives the two-sided p-value ``p``."""
    se = 0.01
    est = est_sign * stats.t.isf(p / 2, n - 1) * se
    half = stats.t.ppf(0.975, n - 1) * se
    return dict(comparison="gmc − onpolicy", d=d, instance=inst, estimate=float(est), lo=float(est - half),
                hi=float(est + half), n=n, G=G, eps=eps, eta_factor=eta)


def _bh(ps):
    return stats.false_discovery_control(ps, method="bh")


def test_regime_line_counts_cells_surviving_bh_not_raw_significance():
    ps = [0.001, 0.03, 0.035, 0.045, 0.5]
    cs = [_cell_with_p(p, 1.0 if k != 1 else -1.0, d=k + 1) for k, p in enumerate(ps)]
    st = dict(instances=["count-frac", "x"], delays=[1, 64], eta_factors=[0.5, 1.0], G=[8], eps=[0.2])
    line = ex.regime_line(rep(regime_map=dict(comparisons=cs, settings=st, interval="IV")))
    q = _bh(ps)
    assert list(q <= 0.05) == [True, False, False, False, False]  # raw p < 0.05 for four, BH keeps one
    assert line.startswith("Regime map (exploratory; 5 cells with d ≥ 1: 2 v5 instances, d ≤ 64, η × [0.5, 1.0], "
                           "G ∈ [8], ε ∈ [0.2]; IV, then Benjamini–Hochberg at q = 0.05 within the map): gmc ahead of "
                           "onpolicy in 1 cells and behind in 0 (before the correction: ahead in 3).")
    assert "Per instance: count-frac: ↑1 ↓0 of 5; surviving ahead: count-frac d = 1 (η×1, G = 8, ε = 0.2)." in line


def test_regime_line_q_at_exactly_the_level_survives_and_behind_is_counted():
    cs = [_cell_with_p(0.05, -1.0), _cell_with_p(0.05, 1.0, inst="b", eta=0.25, G=4, eps=0.5, d=3)]
    q = _bh([0.05, 0.05])
    assert np.allclose(q, 0.05)
    line = ex.regime_line(rep(regime_map=dict(comparisons=cs)))
    assert "gmc ahead of onpolicy in 1 cells and behind in 1" in line
    assert "count-frac: ↑0 ↓1 of 1; b: ↑1 ↓0 of 1; surviving ahead: b d = 3 (η×0.25, G = 4, ε = 0.5)." in line
    assert "95 % paired t, then Benjamini" in line and "0 v5 instances, d ≤ 0" in line


def test_regime_line_filters_cells_and_lists_at_most_four_ahead():
    good = [_cell_with_p(1e-6, d=k + 1) for k in range(5)]
    bad = [dict(good[0], comparison="gmc − is"), dict(good[0], d=0), dict(good[0], lo=math.nan),
           dict(good[0], hi=None), dict(good[0], estimate=math.inf), dict(good[0], n=1), dict(good[0], n=None)]
    line = ex.regime_line(rep(regime_map=dict(comparisons=good + bad)))
    assert "(exploratory; 5 cells" in line and "ahead of onpolicy in 5 cells" in line
    assert line.endswith("count-frac d = 4 (η×1, G = 8, ε = 0.2) ….")
    assert ex.regime_line(rep(regime_map=dict(comparisons=bad))) == ""
    assert ex.regime_line(rep()) == ""


def test_regime_line_zero_width_intervals():
    z = dict(comparison="gmc − onpolicy", d=1, instance="a", estimate=0.0, lo=0.0, hi=0.0, n=5, G=8, eps=0.2,
             eta_factor=1.0)
    nz = dict(z, instance="b", estimate=0.1, lo=0.1, hi=0.1)
    line = ex.regime_line(rep(regime_map=dict(comparisons=[z, nz])))
    assert "ahead of onpolicy in 1 cells and behind in 0 (before the correction: ahead in 1)" in line
    assert "a: ↑0 ↓0 of 1; b: ↑1 ↓0 of 1" in line


def test_regime_line_uses_n_minus_one_degrees_of_freedom():
    # p = 0.04 at n = 3 computed with df = 2; with df = 3 the same interval gives another p
    c = _cell_with_p(0.049, n=3)
    assert "ahead of onpolicy in 1 cells" in ex.regime_line(rep(regime_map=dict(comparisons=[c])))
    c = _cell_with_p(0.051, n=3)
    assert "ahead of onpolicy in 0 cells" in ex.regime_line(rep(regime_map=dict(comparisons=[c])))


# --- exploratory blocks -----------------------------------------------------------------------------------------------

def test_exploratory_blocks_table_regime_line_and_the_other_arm():
    r = rep(sidecars=[dict(figure="f", v6=V6, answer=[
        ent(group="tabular-family", setting="tabular-1", arm="common η", delta=0.2, lo=0.1, hi=0.3, poi=0.6, poi_lo=0.5,
            poi_hi=0.7),
        ent(group="tabular-family", setting="tabular-1", arm="tuned η", rival="tis"),
        ent(group="toy-ladder", setting="rung 6", arm="", interval="IV")])],
        regime_map=dict(comparisons=[_cell_with_p(0.001)]))
    b = ex.exploratory_blocks(r)
    assert b[0] == ("h2", "Exploratory results (never feed the headline)")
    kinds = [x[0] for x in b]
    assert kinds[:3] == ["h2", "table", "p"] and b[3][1].startswith("Regime map (exploratory;")
    assert b[4] == ("p", "Protocol v6 on its other step-size arm (η tuned at d = 0 by onpolicy, shared by every "
                         "estimator):")
    assert b[5][0] == "table" and b[5][1] == ["setting", "d", "rival", "arm", "gmc − rival (IQM) [interval]; P [interval]"]
    assert b[5][2] == [["tabular family (protocol v6, drawn MDPs)", "8", "onpolicy", "common η",
                        "+0.200 [+0.100, +0.300]; P 0.60 [0.50, 0.70]"]]
    assert b[6:] == ex.lm_history_blocks() and len(b) == 9  # the earlier LM versions close the appendix


def test_exploratory_blocks_of_a_report_with_nothing_exploratory():
    assert ex.exploratory_blocks(rep(sidecars=[dict(figure="f", v6=V6)])) == [
        ("h2", "Exploratory results (never feed the headline)")] + ex.lm_history_blocks()


# --- LM failures and broken arms ---------------------------------------------------------------------------------------

def test_lm_failures_counts_failed_runs_per_estimator_at_the_base_step_size():
    runs = [dict(estimator="onpolicy", d=32, failure="diverged"), dict(estimator="onpolicy", d=32, failure="nan"),
            dict(estimator="gmc", d=32, failure="none"), dict(estimator="gmc", d=32, failure="none", lr_factor=1.0),
            dict(estimator="gmc", d=32, failure="nan", lr_factor=2.0), dict(estimator="gmc", d=8, failure="nan")]
    assert lm_runs.lm_failures(rep(lm_meta=dict(runs=runs)), 32) == "onpolicy 2/2, gmc 0/2"
    assert lm_runs.lm_failures(rep(lm_meta=dict(runs=runs)), 8) == "gmc 1/1"
    assert lm_runs.lm_failures(rep(), 8) == ""


def test_broken_arms_are_arms_where_every_run_fails_the_control_included():
    runs = [dict(d=0, failure="nan", lr_factor=4.0), dict(d=8, failure="nan", lr_factor=4.0),
            dict(d=0, failure="none", lr_factor=2.0), dict(d=8, failure="nan", lr_factor=2.0),
            dict(d=8, failure="nan", lr_factor=8.0),                       # no d = 0 control: not broken
            dict(d=0, failure="nan"), dict(d=8, failure="nan"), dict(d=8, lr_factor=1.0)]  # a run without failure: ok
    out = lm_runs.broken_arms(dict(runs=runs))
    assert out == {4.0: "every run fails (2/2), the d = 0 control included (1/1)"}
    assert lm_runs.broken_arms(None) == {} and lm_runs.broken_arms({}) == {}


def test_constants_of_the_first_screen():
    assert an.HEADLINE_GROUPS == ("tabular-family", "lm-like-family", "cpu-lm")
    assert an.CONFIRMATORY == ("tabular-family", "lm-like-family", "cpu-lm", "gpu-lm") and an.MARKED == ("cpu-lm",)
    assert an.DELAYS == (8, 32) and ex.COLUMNS == ("onpolicy", "is", "tis/tic", "grpo", "best peer")
    assert an.CAVEAT.startswith("**Caveat.** The claims C1–C9 are this project's reconstruction")
    assert ex.peer_corrections() == ("verl_seq_tis", "verl_seq_rs", "verl_tok_tis", "verl_geo_rs", "trl_seq_mask")


# --- against the mutmut survivors (issue 55): defaults of absent keys, full texts, both families, boundaries --------

def noarm(**kw):
    e = ent(**kw)
    e.pop("arm", None)
    return e


def test_check_entry_messages_list_the_keys_and_groups():
    e = ent()
    del e["hi"]
    with pytest.raises(ValueError, match=r"needs group, setting, d, rival, delta, lo, hi\)"):
        an.check_entry(e)
    with pytest.raises(ValueError, match="group must be one of tabular-family, lm-like-family, tabular, user-mdp, "
                                         "toy-lm-faithful, toy-ladder, cpu-lm, gpu-lm, got 'toy'"):
        an.check_entry(ent(group="toy"))


def test_regroup_passes_an_unmoved_entry_through_and_keeps_every_field_of_a_moved_one():
    groups = {"lm-faithful-exact": "toy-lm-faithful", "count-frac": "tabular"}
    e = ent(setting="count-frac", arm="tuned η", n=3)
    assert an._regroup(e, groups) is e
    moved = an._regroup(ent(setting="lm-faithful-exact", arm="tuned η", n=3), groups)
    assert moved == ent(group="toy-lm-faithful", setting="lm-faithful-exact", arm="tuned η", n=3)


def test_entries_a_given_row_replaces_only_the_derived_row_of_its_own_arm():
    given = ent(rival="tis", d=8, arm="common η", delta=0.3, lo=0.2, hi=0.4)
    r = rep(sidecars=[dict(figure="f", answer=[given])], protocol=dict(primary=dict(d=8)),
            c9=dict(comparisons=[_c9("gmc − tis (d=8, tuned η)", est=-0.1, lo=-0.2, hi=0.0)]))
    out = an.entries(r)
    assert [(e["rival"], e["arm"]) for e in out] == [("tis", "common η"), ("tis", "tuned η")]
    r["sidecars"][0]["answer"] = [noarm(rival="tis", d=8, delta=0.3, lo=0.2, hi=0.4)]
    assert len(an.entries(r)) == 2  # a row without an arm is not the tuned arm's


def test_main_arm_of_rows_without_an_arm_is_empty():
    assert ex._main_arm([noarm(group="cpu-lm")], "cpu-lm") == ""


def test_broken_arms_reads_a_missing_lr_factor_as_the_base_arm():
    runs = [dict(d=0, failure="nan"), dict(d=8, failure="diverged"), dict(d=0, failure="none", lr_factor=2.0)]
    assert lm_runs.broken_arms(dict(runs=runs)) == {1.0: "every run fails (2/2), the d = 0 control included (1/1)"}


def test_cells_read_a_missing_arm_as_the_empty_arm_and_use_the_given_peers():
    cs = ex.cells([ent(rival="tis", arm="", delta=0.2, lo=0.1, hi=0.3), noarm(rival="tic", delta=0.1, lo=0.0, hi=0.2)],
                  PEERS)
    assert [e["rival"] for e in cs[("tabular", "tis/tic", 8)]] == ["tic"]
    cs = ex.cells([ent(rival="mypeer")], ("mypeer",))
    assert ("tabular", "best peer", 8) in cs


def test_derive_lm_pairs_seeds_at_the_same_delay_and_goes_on_after_a_rival_without_pairs():
    runs = [dict(estimator="gmc", d=8, seed=s, auc=0.5) for s in (0, 1)]
    runs += [dict(estimator="gmc", d=32, seed=s, auc=0.6) for s in (2, 3)]
    runs += [dict(estimator="is", d=8, seed=s, auc=0.4) for s in (2, 3)]     # no gmc seed to pair at d = 8
    runs += [dict(estimator="tis", d=8, seed=s, auc=0.3 + 0.01 * s) for s in (0, 1)]
    out = an.derive_lm(rep(lm_meta=dict(runs=runs)))
    assert [(e["d"], e["rival"], e["n"]) for e in out] == [(8, "tis", 2)]


def test_derive_tabular_default_group_and_the_eps_tolerance_is_strict():
    out = an.derive_tabular(rep(regime_map=dict(comparisons=[_rm()])))
    assert out[0]["group"] == "tabular"
    c9 = dict(comparisons=[_c9("gmc − tis (d=8, tuned η)", inst="nowhere")])
    assert an.derive_tabular(rep(c9=c9, protocol=dict(primary=dict(d=8))))[0]["group"] == "tabular"
    rm = dict(settings=dict(primary_G=8, primary_eps=0.0), comparisons=[_rm(eps=1e-12), _rm(eps=0.0, d=32)])
    assert [e["d"] for e in an.derive_tabular(rep(regime_map=rm))] == [32]


def test_exploratory_table_full_note_class_columns_and_armless_rows():
    es = [noarm(group="cpu-lm", setting="tiny", metric="accuracy AUC", interval="IV-lm"),
          noarm(group="cpu-lm", setting="tiny", rival="tis", delta=0.2, lo=0.1, hi=0.3),
          ent(group="toy-ladder", setting="r6", rival="is", arm="tuned η"),
          ent(group="toy-ladder", setting="r6", rival="is", d=32, arm="common η"),
          ent(group="toy-ladder", setting="r7", rival="is", d=32, arm="x η")]
    header, rows, note = ex.exploratory_table(rep(), es)
    lm = rows[1]
    assert lm[0] == "tiny LM on CPU (2-digit sums) [accuracy AUC]"
    assert lm[1] == "+0.100 [+0.050, +0.150]" and lm[5] == "+0.200 [+0.100, +0.300] (tis)"  # no arm bracket
    ladder = rows[0]
    assert ladder[4] == "+0.100 [+0.050, +0.150] [common η]"  # one_arm keeps one arm per cell
    peers = ", ".join(ex.peer_corrections())
    assert note == (
        "Exploratory: these rows come from protocol versions, instances and seeds chosen or seen before protocol "
        "v6 (v5's instances, the ladder, the LM protocol v7); they never feed the headline. Positive: gmc better. "
        "One setting: mean [interval]; several (tabular instances): range of the means over instances, ↑k / ↓k = "
        "instances whose interval lies entirely above / below 0; a cell measured only on another step-size arm than "
        "its row's names it in brackets. Intervals: tiny LM on CPU: IV-lm"
        f". tis/tic and best peer ({peers}): the rival with the largest mean, named. —: not measured at that d.")


def test_one_arm_default_and_given_peers():
    es = [ent(rival="verl_seq_tis", arm="common η"), ent(rival="trl_seq_mask", arm="tuned η")]
    assert ex.one_arm(es) == [es[1]]
    es = [ent(rival="verl_seq_tis", arm="common η"), ent(rival="mypeer", arm="tuned η")]
    assert ex.one_arm(es, ("verl_seq_tis", "mypeer")) == [es[1]]


def test_headline_settings_and_table_read_the_entries_of_the_report_when_none_are_given():
    es = _v6ents()
    r = rep(sidecars=[dict(figure="f", v6=V6, answer=es)])
    assert an.headline_settings(r)[0][1] == [e for e in es if e["group"] == "tabular-family"]
    header, rows, _ = an.table(r)
    assert header == ["gmc − rival", "tabular family, d = 8", "tabular family, d = 32", "LM-like family, d = 8",
                      "LM-like family, d = 32", "tiny LM", "LM on a GPU"]
    assert rows[1] == ["tis"] + ["+0.100 [+0.050, +0.150]"] * 4 + ["not run"] * 2


def test_table_interval_comes_from_a_confirmatory_row_and_full_note():
    es = [ent(group="toy-ladder", interval="EXPLORATORY-IV")] + [dict(e, interval="IVX") for e in _v6ents()]
    meta = {k: v for k, v in V6.items() if k not in ("label", "name")}
    _, _, note = an.table(rep(sidecars=[dict(figure="f", v6=meta)]), es)
    assert note == (
        "Protocol `v6` (confirmatory: instances drawn by seed, fresh seeds), tuned η. Each cell: the IQM difference of "
        "nAUC, gmc − rival (positive: gmc better) [interval], and P = P(gmc > rival), rliable's probability of "
        "improvement [interval]; intervals: IVX, over the family's instances × held-out seeds; tiny LM (LM protocol "
        "v8): the mean difference of accuracy AUC with its 95 % paired t-interval over the fresh seeds. not run: no "
        "results for the setting; not measured: a rival missing at that d; 0 (identical runs): every seed's run equal (d = 0, "
        "where ρ = 1). The other step-size arm, per-instance paired t-intervals and the exploratory rows (earlier "
        "protocols, the ladder, LM v2–v7, the regime map): REPORT-details.md.")


def test_v6_meta_from_the_file_carries_its_hash():
    from simulate.protocol.spec import V6_PATH, load_protocol

    assert an.v6_meta(rep())["sha256"] == load_protocol(V6_PATH).sha256


def test_exploratory_blocks_kinds_and_the_lm_like_family_other_arm():
    r = rep(sidecars=[dict(figure="f", v6=V6, answer=[
        ent(group="lm-like-family", setting="lm-like-1", arm="common η")])],
        regime_map=dict(comparisons=[_cell_with_p(0.001)]))
    b = ex.exploratory_blocks(r)
    assert b[-3:] == ex.lm_history_blocks() and [x[0] for x in b[:-3]] == ["h2", "p", "p", "table"]
    assert b[3][2][0][0] == "LM-like family (protocol v6, drawn instances)"


def test_regime_line_counts_per_instance_and_lists_several_ahead():
    cs = [_cell_with_p(1e-6, d=1), _cell_with_p(1e-6, d=2), _cell_with_p(1e-6, d=3), _cell_with_p(1e-6, d=4)]
    line = ex.regime_line(rep(regime_map=dict(comparisons=cs)))
    assert "count-frac: ↑4 ↓0 of 4; surviving ahead: count-frac d = 1 (η×1, G = 8, ε = 0.2), count-frac d = 2 " in line
    assert line.endswith("count-frac d = 4 (η×1, G = 8, ε = 0.2).")  # exactly four: no ellipsis


def test_regime_line_without_a_cell_ahead_ends_at_the_per_instance_counts():
    line = ex.regime_line(rep(regime_map=dict(comparisons=[_cell_with_p(0.5)])))
    assert line.endswith("Per instance: count-frac: ↑0 ↓0 of 1.")


def test_regime_line_skips_a_cell_without_a_delay_and_keeps_n_two():
    no_d = {k: v for k, v in _cell_with_p(1e-6).items() if k != "d"}
    line = ex.regime_line(rep(regime_map=dict(comparisons=[no_d, _cell_with_p(1e-6, n=2)])))
    assert "(exploratory; 1 cells" in line and "ahead of onpolicy in 1 cells" in line


def test_exploratory_blocks_accept_a_v6_row_without_an_arm():
    r = rep(sidecars=[dict(figure="f", v6=V6, answer=[noarm(group="tabular-family", setting="tabular-1")])])
    assert an.table(r)[1][0][1] == "+0.100 [+0.050, +0.150]"  # the first table reads it as the primary arm's
    blocks = ex.exploratory_blocks(r)[:-3]  # less the earlier LM versions' table
    assert all(b[0] != "table" for b in blocks)  # not shown again as another arm


def test_cell_of_identical_runs_at_d0():
    e = ent(delta=0.0, lo=0.0, hi=0.0, poi=0.5, poi_lo=0.5, poi_hi=0.5)
    assert an._cell(e) == "0 (identical runs)"
    assert an._cell(dict(e, poi_lo=0.4)) == "+0.000 [+0.000, +0.000]; P 0.50 [0.40, 0.50]"
    assert an._cell(dict(e, hi=1e-9, delta=0.0)) == "+0.000 [+0.000, +0.000]; P 0.50 [0.50, 0.50]"
    assert an._cell(ent(delta=0.0, lo=0.0, hi=0.0)) == "+0.000 [+0.000, +0.000]"  # no P: not the d = 0 identity


def test_damaged_evidence_is_never_judged():
    es = _v6ents()
    why = "not run (evidence missing: fig_protocol_v6)"
    r = rep(sidecars=[dict(figure="f", v6=V6)], not_run={"answer:tabular-family": why})
    hs = an.headline_settings(r, es)
    assert hs[0][1] == [] and len(hs[1][1]) == 4
    header, rows, _ = an.table(r, es)
    assert header == ["gmc − rival", "tabular family", "LM-like family, d = 8", "LM-like family, d = 32", "tiny LM",
                      "LM on a GPU"]
    assert rows[0] == ["onpolicy", why, "+0.100 [+0.050, +0.150]", "+0.100 [+0.050, +0.150]", "not run", "not run"]
    assert an.recommendation(r, es)[0].endswith("not run: no results yet → no recommendation.")


def test_main_arm_without_tuned_is_the_first_arm_seen():
    assert ex._main_arm([ent(arm="common η"), ent(arm="x η")], "tabular") == "common η"


def test_regime_line_skips_a_cell_whose_interval_does_not_hold_its_estimate():
    """An inverted interval (lo > hi) has no p-value: it is never counted as significant (issue 55 report)."""
    good = dict(instance="a", d=8, G=8, eps=0.2, eta_factor=1.0, comparison="gmc − onpolicy", estimate=0.5, lo=0.45,
                hi=0.55, n=24)
    bad = dict(good, instance="b", lo=0.55, hi=0.45)
    r = rep(regime_map=dict(comparisons=[good, bad], settings=dict(instances=["a", "b"], delays=[8])))
    line = ex.regime_line(r)
    assert "1 cells with d ≥ 1" in line and "ahead of onpolicy in 1 cells" in line and "b:" not in line


# --- the tiny LM's confirmatory rows (LM protocol v8) -------------------------------------------------------------------

def _lm(d, rival, delta=0.1, lo=0.05, hi=0.15, marked=True):
    e = ent(group="cpu-lm", setting="tiny LM", d=d, rival=rival, arm="", delta=delta, lo=lo, hi=hi, n=16,
            interval="95 % paired t, 16 seeds")
    return dict(e, confirmatory=True) if marked else e


def test_is_confirmatory_reads_the_mark_only_in_marked_groups():
    assert an.is_confirmatory(ent(group="tabular-family")) and an.is_confirmatory(ent(group="gpu-lm"))
    assert not an.is_confirmatory(_lm(8, "tis", marked=False)) and an.is_confirmatory(_lm(8, "tis"))
    assert not an.is_confirmatory(dict(ent(group="toy-ladder"), confirmatory=True))  # the mark cannot promote a group
    assert not an.is_confirmatory(dict(_lm(8, "tis"), confirmatory=False))


def test_cell_of_the_lm_d0_identity_and_of_a_zero_elsewhere():
    assert an._cell(_lm(0, "tis", 0.0, 0.0, 0.0)) == "0 (identical runs)"
    assert an._cell(_lm(8, "tis", 0.0, 0.0, 0.0)) == "+0.000 [+0.000, +0.000]"  # d > 0: a measured zero
    assert an._cell(_lm(0, "tis", 0.0, 0.0, 0.01)) == "+0.000 [+0.000, +0.010]"


def test_lm_rows_enter_the_first_table_and_the_headline_only_when_marked():
    meta = dict(V6, delays=[0, 8, 32])
    lm = [_lm(d, r, *((0.0, 0.0, 0.0) if d == 0 else (0.1, 0.05, 0.15))) for r in ("onpolicy", "tis") for d in (0, 8, 32)]
    lm[-1] = dict(lm[-1], delta=-0.2, lo=-0.3, hi=-0.1)  # tis beats gmc at d = 32
    r = rep(sidecars=[dict(figure="f", v6=meta)])
    header, rows, note = an.table(r, lm)
    assert header == ["gmc − rival", "tabular family", "LM-like family", "tiny LM, d = 0", "tiny LM, d = 8",
                      "tiny LM, d = 32", "LM on a GPU"]
    assert rows[1] == ["tis", "not run", "not run", "0 (identical runs)", "+0.100 [+0.050, +0.150]",
                       "−0.200 [−0.300, −0.100]", "not run"]
    assert "intervals: 95 % stratified bootstrap percentile interval" in note  # the LM's t-interval is not the families'
    lines = an.recommendation(r, lm)
    assert lines[2].startswith("Tiny LM on CPU (LM v8, fresh seeds): use **tis**, not gmc: it beats gmc at d = 32 by "
                               "+0.200 [+0.100, +0.300]")
    unmarked = [dict(e, confirmatory=False) for e in lm]
    assert an.table(r, unmarked)[1][1][3] == "not run"
    assert an.recommendation(r, unmarked)[2].endswith("→ no recommendation.")
    assert ex.exploratory_table(r, unmarked)[1] and not ex.exploratory_table(r, lm)[1]


# --- issue 55, second round: the appendix's last blocks and a zero-width regime cell ---------------------------------

def test_lm_history_blocks_name_their_kinds_and_why_they_are_absent(monkeypatch):
    from figures.report import lm_history
    data = {"interval": "95 % paired t", "versions": []}
    monkeypatch.setattr(lm_history, "load", lambda path=None: data)
    header, rows, note = lm_history.table(data)
    assert ex.lm_history_blocks() == [("p", "Earlier LM protocol versions (exploratory):"), ("table", header, rows),
                                      ("p", note)]

    def broken(path=None):
        raise ValueError("LM history x: unreadable (boom)")
    monkeypatch.setattr(lm_history, "load", broken)
    assert ex.lm_history_blocks() == [("p", "Earlier LM protocol versions: not shown (LM history x: unreadable (boom)).")]


def test_regime_line_a_zero_width_interval_away_from_zero_is_significant():
    rm = dict(settings=dict(instances=["count-frac"], delays=[8], eta_factors=[1.0], G=[8], eps=[0.2]),
              comparisons=[_rm(estimate=0.3, lo=0.3, hi=0.3, n=4), _rm(estimate=-0.2, lo=-0.2, hi=-0.2, n=4, d=32),
                           _rm(estimate=0.01, lo=-0.1, hi=0.12, n=4, d=16)])
    line = ex.regime_line(rep(regime_map=rm))
    assert "gmc ahead of onpolicy in 1 cells and behind in 1 (before the correction: ahead in 1)" in line
    assert "count-frac: ↑1 ↓1 of 3" in line


def test_a_v6_cell_at_d0_reads_identical_runs_only_with_p_exactly_one_half():
    e = dict(d=0, delta=0.0, lo=0.0, hi=0.0, poi=0.6, poi_lo=0.55, poi_hi=0.65)
    assert an._cell(e) == "+0.000 [+0.000, +0.000]; P 0.60 [0.55, 0.65]"
    assert an._cell(dict(e, poi=0.5, poi_lo=0.5, poi_hi=0.5)) == "0 (identical runs)"
    assert an._cell(dict(d=0, delta=0.0, lo=0.0, hi=0.0)) == "0 (identical runs)"       # the tiny LM's d = 0 (no P)
