"""``simulate score``'s decision parts on small synthetic inputs (issue 55): the scorecard's entries per family, the
markdown the headline rule writes, the rival set a map is scored against and the refusals — seconds, no training
(the cells, the figure and the property kit are stood in for where they would train or draw)."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from simulate import score as sc
from simulate.protocol import aggregate as ag


def entry(rival, d, delta, lo, hi, n=3, poi=0.5, poi_lo=0.4, poi_hi=0.6):
    return dict(rival=rival, d=d, delta=delta, lo=lo, hi=hi, poi=poi, poi_lo=poi_lo, poi_hi=poi_hi, n_instances=n)


PROTO = SimpleNamespace(label="toy-v6@abc", delays=(0, 8), primary_arm="tuned", eval_seeds=(1, 2, 3, 4))


def test_entries_are_grouped_by_family_and_keep_only_the_rule_fields(monkeypatch):
    comps = [dict(family="tabular", rival="tis", d=8, delta=-0.1, lo=-0.2, hi=-0.05, poi=0.3, poi_lo=0.2, poi_hi=0.4,
                  n_instances=6, extra="dropped"),
             dict(family="lm-like", rival="tis", d=8, delta=0.1, lo=0.05, hi=0.2, poi=0.7, poi_lo=0.6, poi_hi=0.8,
                  n_instances=5, extra="dropped"),
             dict(family="tabular", rival="gmc", d=0, delta=0.0, lo=0.0, hi=0.0, poi=0.5, poi_lo=0.5, poi_hi=0.5,
                  n_instances=6, extra="dropped")]
    seen = {}

    def fake(table, proto, name, rivals):
        seen.update(table=table, proto=proto, name=name, rivals=rivals)
        return comps

    monkeypatch.setattr(ag, "family_comparisons", fake)
    out = sc.scorecard_entries("T", PROTO, "snis", ("gmc", "tis"))
    assert seen == dict(table="T", proto=PROTO, name="snis", rivals=("gmc", "tis"))
    assert list(out) == ["tabular", "lm-like"]  # first-seen order
    assert [e["rival"] for e in out["tabular"]] == ["tis", "gmc"]
    keys = {"rival", "d", "delta", "lo", "hi", "poi", "poi_lo", "poi_hi", "n_instances"}
    assert all(set(e) == keys for es in out.values() for e in es)
    assert out["lm-like"][0]["n_instances"] == 5 and out["tabular"][0]["delta"] == -0.1


def test_markdown_a_rival_ahead_is_named_and_a_missing_cell_reads_not_measured():
    entries = {"tabular": [entry("gmc", 0, 0.0, 0.0, 0.0, n=6), entry("gmc", 8, 0.02, -0.01, 0.05, n=6),
                           entry("tis", 0, 0.0, 0.0, 0.0, n=6), entry("tis", 8, -0.125, -0.2, -0.05, n=6)]}
    fig = "fig" + ".png"  # built, so the docs' link check does not read this file's string as a link
    md = sc.scorecard_markdown("snis", PROTO, entries, [["w_le_rho", "refuted", "a | b"]], fig)
    verdict = md.split("## Verdict")[1].split("\n## ")[0]
    assert "tabular family (6 drawn): use **tis**, not snis: it beats snis at d = 8 by +0.125 [+0.050, +0.200]" \
        in verdict
    assert "snis behind at d ∈ {8}" in verdict
    assert "Protocol `toy-v6@abc`" in md and "d ∈ {0, 8}" in md and "4 held-out seeds" in md and "(tuned arm)" in md
    table = md.split("## snis − each rival")[1].split("## Property kit")[0]
    assert "| rival | tabular, d = 0 | tabular, d = 8 |" in table
    assert "| tis | +0.000 [+0.000, +0.000]; P 0.50 [0.40, 0.60] | −0.125 [−0.200, −0.050]; P 0.50 [0.40, 0.60] |" \
        in table
    assert ag.INTERVAL in md
    assert "| w_le_rho | refuted | a \\| b |" in md  # a cell's pipe escaped, the table stays whole
    assert md.endswith("![performance profiles](" + fig + ")\n")
    # one cell missing: the rule gives no recommendation and the table says so
    entries["tabular"] = entries["tabular"][:-1]
    md = sc.scorecard_markdown("snis", PROTO, entries, [], None)
    assert "not measured: tis → no recommendation." in md and "| tis | +0.000 [+0.000, +0.000]; P 0.50 [0.40, 0.60] " \
        "| not measured |" in md
    assert "performance profiles" not in md


def test_markdown_use_the_map_only_when_no_rival_is_ahead_at_any_delay():
    entries = {"lm-like": [entry("gmc", 0, 0.0, 0.0, 0.0, n=2), entry("gmc", 8, 0.03, 0.01, 0.05, n=2),
                           entry("tis", 0, 0.0, 0.0, 0.0, n=2), entry("tis", 8, 0.0, -0.01, 0.01, n=2)],
               "tabular": [entry("gmc", 0, 0.0, 0.0, 0.0), entry("gmc", 8, -0.01, -0.03, -0.001),
                           entry("tis", 0, 0.0, 0.0, 0.0), entry("tis", 8, 0.2, 0.1, 0.3)]}
    md = sc.scorecard_markdown("mymap", PROTO, entries, [], None)
    assert "- lm-like family (2 drawn): use **mymap**: not significantly behind any of 2 rivals at d ∈ {0, 8}; " \
           "ahead of 1." in md
    assert "- tabular family (3 drawn): use **gmc**, not mymap: it beats mymap at d = 8 by +0.010 [+0.001, +0.030]" \
        in md
    head = next(s for s in md.splitlines() if s.startswith("| rival |"))
    assert head == "| rival | lm-like, d = 0 | lm-like, d = 8 | tabular, d = 0 | tabular, d = 8 |"
    assert [s.split(" | ")[0] for s in md.splitlines() if s.startswith("| ") and "[" in s] == ["| gmc", "| tis"]


@pytest.fixture
def stand_ins(monkeypatch, tmp_path):
    """score() without cells, figure or property kit: records the protocol it ran and the rivals it compared."""
    import simulate.protocol as sp

    seen = {}

    def run_protocol(proto, **kw):
        seen.update(proto=proto, kw=kw)
        return SimpleNamespace(table="TABLE")

    def entries(table, proto, name, rivals):
        seen.update(rivals=rivals, name=name, table=table)
        return {"tabular": [entry(r, d, 0.0, -0.01, 0.01) for r in rivals for d in proto.delays]}

    def plot(table, proto, name, rivals, path):
        seen.update(plot=(table, proto, name, rivals, Path(path).name))
        Path(path).write_bytes(b"png")

    def props(name, eps):
        seen.update(props=(name, eps))
        return [["kit", "holds", f"eps={eps}"]]

    def markdown(name, proto, entries, props, figure):
        seen.update(markdown=(name, figure))
        return real_markdown(name, proto, entries, props, figure)

    from simulate import score_figure

    real_markdown = sc.scorecard_markdown
    monkeypatch.setattr(sp, "run_protocol", run_protocol)
    monkeypatch.setattr(sc, "scorecard_entries", entries)
    monkeypatch.setattr(score_figure, "performance_profiles", plot)
    monkeypatch.setattr(sc, "property_rows", props)
    monkeypatch.setattr(sc, "scorecard_markdown", markdown)
    return seen


def test_score_runs_the_map_beside_gmc_and_the_rival_set(stand_ins, tmp_path):
    from simulate.protocol.spec import V6_PATH, load_protocol

    base = load_protocol(V6_PATH, quick=True)
    md = sc.score("snis", quick=True, out=tmp_path / "o", progress=False, backend="serial")
    assert md == tmp_path / "o" / "scorecard-snis.md" and (tmp_path / "o" / "scorecard-snis.png").exists()
    assert stand_ins["rivals"] == tuple(dict.fromkeys(("gmc", *base.rivals)))
    assert stand_ins["proto"].estimators == tuple(dict.fromkeys((*base.estimators, "snis")))
    assert stand_ins["kw"]["backend"] == "serial" and stand_ins["kw"]["quick"] is True
    assert stand_ins["kw"]["path"] == V6_PATH and stand_ins["kw"]["progress"] is False
    assert stand_ins["proto"].eval_seeds == base.eval_seeds != load_protocol(V6_PATH, quick=False).eval_seeds
    assert stand_ins["table"] == "TABLE"  # the protocol run's table is what gets scored
    assert stand_ins["name"] == "snis" and stand_ins["props"] == ("snis", float(base.primary["eps"]))
    assert stand_ins["plot"] == ("TABLE", stand_ins["proto"], "snis", stand_ins["rivals"], "scorecard-snis.png")
    assert stand_ins["markdown"] == ("snis", "scorecard-snis.png")
    text = md.read_text()
    assert f"| kit | holds | eps={float(base.primary['eps'])} |" in text and "(scorecard-snis.png)" in text
    # scoring a rival itself: it is not its own rival, and it is not added twice to the estimators
    sc.score("tis", quick=True, out=tmp_path / "o2", progress=False, backend="serial")
    assert "tis" not in stand_ins["rivals"] and stand_ins["rivals"][0] == "gmc"
    assert stand_ins["proto"].estimators.count("tis") == 1
    sc.score("gmc", quick=True, out=tmp_path / "o3", progress=False, backend="serial")
    assert "gmc" not in stand_ins["rivals"]


def test_score_defaults_full_protocol_with_progress_into_results_score(stand_ins, tmp_path, monkeypatch):
    from simulate.protocol.spec import V6_PATH, load_protocol

    monkeypatch.chdir(tmp_path)
    md = sc.score("snis", backend="serial")
    assert md == Path("results/score/scorecard-snis.md") and md.exists()  # parents made
    assert stand_ins["kw"]["quick"] is False and stand_ins["kw"]["progress"] is True
    assert stand_ins["proto"].eval_seeds == load_protocol(V6_PATH, quick=False).eval_seeds
    assert sc.score("snis", out=tmp_path / "a" / "b" / "c", backend="serial").exists()


def test_score_takes_its_options_by_keyword_only(stand_ins, tmp_path):
    """``score(name, *, quick, out, …)``: the name by position or keyword, every option by keyword only (a
    positional ``True`` must not silently mean ``quick``)."""
    assert sc.score(name="snis", quick=True, out=tmp_path / "k", progress=False, backend="serial").exists()
    with pytest.raises(TypeError):
        sc.score("snis", True, out=tmp_path / "p")


def test_score_picks_a_backend_from_the_workers(stand_ins, tmp_path, monkeypatch):
    sc.score("snis", quick=True, out=tmp_path / "a", progress=False, n_workers=1)
    assert stand_ins["kw"]["backend"] == "serial"
    sc.score("snis", quick=True, out=tmp_path / "b", progress=False, n_workers=2)
    assert stand_ins["kw"]["backend"] == "local"
    monkeypatch.setattr(sc.os, "cpu_count", lambda: 1)
    sc.score("snis", quick=True, out=tmp_path / "c", progress=False)
    assert stand_ins["kw"]["backend"] == "serial"
    monkeypatch.setattr(sc.os, "cpu_count", lambda: 4)
    sc.score("snis", quick=True, out=tmp_path / "d", progress=False)
    assert stand_ins["kw"]["backend"] == "local"
    sc.score("snis", quick=True, out=tmp_path / "e", progress=False, scheduler="tcp://x:1")
    assert "backend" not in stand_ins["kw"]  # a scheduler (or client) chooses, not score
    sc.score("snis", quick=True, out=tmp_path / "f", progress=False, client="a client")
    assert "backend" not in stand_ins["kw"] and stand_ins["kw"]["client"] == "a client"
    monkeypatch.setattr(sc.os, "cpu_count", lambda: None)  # unknown: one worker
    sc.score("snis", quick=True, out=tmp_path / "g", progress=False)
    assert stand_ins["kw"]["backend"] == "serial"


def test_score_refuses_an_unknown_map_and_a_protocol_before_v6(stand_ins, tmp_path):
    from simulate.protocol.spec import V6_PATH

    with pytest.raises(ValueError, match=r"estimator must be a registered name \([a-z_0-9]+(, [a-z_0-9]+)+\); a plugin "
                                         r"map is registered by naming its module in \$ASYNCGRPO_ESTIMATORS \(or "
                                         r"--estimator module:NAME\), got 'nope'"):
        sc.score("nope", out=tmp_path)
    with pytest.raises(ValueError, match=r"protocol must be a version-6 file .* got version 5 \(.*protocol-v5.toml\)"):
        sc.score("snis", protocol=V6_PATH.with_name("protocol-v5.toml"), out=tmp_path)
    assert "proto" not in stand_ins  # nothing ran


def test_property_rows_a_token_level_loss_is_out_of_scope_and_a_map_gets_the_kit():
    from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

    tok = sorted(TOKEN_ESTIMATORS)[0]
    assert sc.property_rows(tok, 0.2) == [["trajectory weight-map properties", "out of scope",
                                           f"{tok} is a token-level loss, not a map"]]
    rows = sc.property_rows("gmc", 0.2)
    assert len(rows) > 3 and all(len(r) == 3 and r[1] for r in rows)
    assert dict((r[0], r[1]) for r in rows)["w_le_rho"] == "holds"
    assert dict((r[0], r[1]) for r in rows)["mean_le_1_plus_eps"] == "holds"  # gmc is in 𝒲_ε: the kit ran on it
    assert dict((r[0], r[1]) for r in sc.property_rows("is", 0.2))["mean_le_1_plus_eps"] == "refuted"


def test_a_frozen_protocol_copy_is_not_mutated(stand_ins, tmp_path):
    """score adds the map to a copy of the protocol's estimators: the loaded protocol keeps its own."""
    from simulate.protocol.spec import V6_PATH, load_protocol

    sc.score("snis", quick=True, out=tmp_path, progress=False, backend="serial")
    assert "snis" not in load_protocol(V6_PATH, quick=True).estimators
    assert dataclasses.is_dataclass(stand_ins["proto"])


def test_property_rows_hand_the_kit_the_map_its_eps_and_budget(monkeypatch):
    """The kit gets the registered map at the card's ε, 50 examples and the map's name; a row without a detail shows
    its description."""
    import asyncgrpo.testing as kit
    from asyncgrpo import estimators as est

    seen = {}

    def fake(fn, *, eps, max_examples, name):
        seen.update(eps=eps, max_examples=max_examples, name=name, w=fn(np.array([0.0, 1.0]), eps))
        row = SimpleNamespace
        return SimpleNamespace(rows=[row(property="a", verdict="holds", detail="measured 1", description="what a is"),
                                     row(property="b", verdict="refuted", detail="", description="what b is")])

    monkeypatch.setattr(kit, "check_weight_map", fake)
    assert sc.property_rows("tis", 0.3) == [["a", "holds", "measured 1"], ["b", "refuted", "what b is"]]
    assert (seen["eps"], seen["max_examples"], seen["name"]) == (0.3, 50, "tis")
    np.testing.assert_array_equal(seen["w"], est.get("tis", eps=0.3)(np.array([0.0, 1.0])))
    assert not np.array_equal(seen["w"], est.get("tis", eps=0.2)(np.array([0.0, 1.0])))  # ε reaches the map


def test_the_scorecard_layout_in_full():
    """The whole page for one family, one rival, two delays (the layout users and their scripts read)."""
    entries = {"tabular": [entry("tis", 0, 0.0, 0.0, 0.0, n=6), entry("tis", 8, 0.05, 0.01, 0.09, n=6)],
               "lm-like": [entry("tis", 0, 0.0, 0.0, 0.0, n=4), entry("tis", 8, 0.05, 0.01, 0.09, n=4)]}
    fig = "f" + ".png"
    md = sc.scorecard_markdown("m", PROTO, entries, [["p", "holds", "d"]], fig)
    cell0, cell8 = "+0.000 [+0.000, +0.000]; P 0.50 [0.40, 0.60]", "+0.050 [+0.010, +0.090]; P 0.50 [0.40, 0.60]"
    expected = "\n".join([
        "# Staleness scorecard: `m`", "",
        "Protocol `toy-v6@abc` (docs/protocol.md, version 6): instances drawn by seed, d ∈ {0, 8}, η tuned per "
        "estimator (tuned arm), 4 held-out seeds per instance. Positive: `m` better.", "",
        "## Verdict (the report's headline rule)", "",
        "- tabular family (6 drawn): use **m**: not significantly behind any of 1 rivals at d ∈ {0, 8}; ahead of 1.",
        "- lm-like family (4 drawn): use **m**: not significantly behind any of 1 rivals at d ∈ {0, 8}; ahead of 1.",
        "", "## m − each rival", "",
        f"IQM difference of nAUC [interval]; P = P(m > rival), rliable's probability of improvement [interval]; "
        f"intervals: {ag.INTERVAL}.", "",
        "| rival | tabular, d = 0 | tabular, d = 8 | lm-like, d = 0 | lm-like, d = 8 |", "|---|---|---|---|---|",
        f"| tis | {cell0} | {cell8} | {cell0} | {cell8} |", "",
        "## Property kit (asyncgrpo.testing.check_weight_map, NumPy backend)", "",
        "| property | verdict | detail |", "|---|---|---|", "| p | holds | d |", "",
        "![performance profiles](" + fig + ")"]) + "\n"
    assert md == expected
    # the family's instance count is read from its own entries, whichever entry comes first
    entries["tabular"][1]["n_instances"] = 99
    assert "tabular family (6 drawn)" in sc.scorecard_markdown("m", PROTO, entries, [], None)
