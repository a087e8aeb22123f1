"""The earlier LM protocol versions' extract (figures/report/lm_history.py, issue 53): one rule for every version,
a sealed file that refuses edits, and a table that names what was not measured."""
from __future__ import annotations

import hashlib
import json
import subprocess

import pytest

from figures.report import lm_history as h
from simulate import verdicts as vd


def _sidecar(version=7, gap=0.1):
    runs = [dict(estimator=e, d=d, seed=s, lr_factor=f, auc=0.5 + (gap if e == "gmc" else 0.0) + 0.01 * s * (e == "is"))
            for e in ("gmc", "is", "tis") for d in (8, 32) for s in range(3) for f in (1.0, 3.0)]
    return json.dumps(dict(lm_protocol=dict(version=version), protocol_hash="abc", verdict="inconclusive", runs=runs,
                           comparisons=[dict(name="gmc not worse than is at d=32", verdict="holds")])).encode()


def test_extract_pairs_seeds_on_the_base_step_size_with_the_95_t_interval():
    raw = _sidecar()
    rec = h.extract(7, raw, "c0ffee")
    assert rec["sidecar_sha256"] == hashlib.sha256(raw).hexdigest() and rec["n_seeds"] == 3
    row = next(r for r in rec["rows"] if r["rival"] == "is" and r["d"] == 32)
    m, lo, hi = vd.t_interval([0.1, 0.09, 0.08], 0.95)
    assert (row["delta"], row["lo"], row["hi"], row["n"]) == pytest.approx((m, lo, hi, 3))
    assert row["holm"] == "holds" and next(r for r in rec["rows"] if r["rival"] == "tis")["holm"] is None
    assert {r["rival"] for r in rec["rows"]} == {"is", "tis"}  # onpolicy, tic, grpo absent: no row


def test_extract_refuses_a_sidecar_of_another_version():
    with pytest.raises(ValueError, match="holds LM protocol version 6, expected 7"):
        h.extract(7, _sidecar(version=6), "c0ffee")


def test_load_refuses_an_edited_or_unreadable_file(tmp_path):
    body = {"interval": "x", "versions": [h.extract(7, _sidecar(), "c0ffee")]}
    p = tmp_path / "v.json"
    p.write_text(json.dumps({**body, "seal": hashlib.sha256(h._canonical(body)).hexdigest()}))
    assert h.load(p) == body
    edited = json.loads(p.read_text())
    edited["versions"][0]["rows"][0]["delta"] += 0.01
    p.write_text(json.dumps(edited))
    with pytest.raises(ValueError, match="seal does not match"):
        h.load(p)
    p.write_text("{")
    with pytest.raises(ValueError, match="unreadable"):
        h.load(p)


def test_table_rows_per_version_with_not_measured_cells():
    data = {"interval": "95 % paired t", "versions": [h.extract(7, _sidecar(), "c0ffee")]}
    header, rows, note = h.table(data)
    assert header[0] == "LM protocol" and header[-1] == "C9 at LM scale" and len(header) == 2 + len(h.RIVALS)
    row = dict(zip(header, rows[0]))
    assert row["LM protocol"] == "v7 (abc, 3 seeds, report c0ffee)"
    assert row["gmc − onpolicy, d = 32"] == "not measured" and row["gmc − is, d = 32"].endswith("(holds)")
    assert "Exploratory" in note and "95 % paired t" in note


def test_committed_extract_is_sealed_and_matches_git_history():
    data = h.load()
    assert [v["version"] for v in data["versions"]] == [v for v, _ in h.VERSIONS]
    have = subprocess.run(["git", "cat-file", "-e", f"{h.VERSIONS[0][1]}^{{commit}}"], cwd=h.ROOT).returncode == 0
    if have:  # a clone with history re-makes it exactly (a shallow clone checks the seal above only)
        assert data == {k: v for k, v in h.from_git().items() if k != "seal"}


# --- issue 55, second round: the command and the extract's edges ----------------------------------------------------

def _fresh():
    body = {"interval": "95 % paired t", "versions": [h.extract(7, _sidecar(), "c0ffee")]}
    return {**body, "seal": hashlib.sha256(h._canonical(body)).hexdigest()}


def test_main_writes_the_extract_and_check_compares_it(tmp_path, monkeypatch, capsys):
    fresh = _fresh()
    path = tmp_path / "history" / "lm_versions.json"
    monkeypatch.setattr(h, "from_git", lambda root=h.ROOT: fresh)
    monkeypatch.setattr(h, "PATH", path)
    assert h.main([]) == 0
    assert path.read_text() == json.dumps(fresh, indent=1, sort_keys=True) + "\n"
    assert capsys.readouterr().out == f"wrote {path}\n"
    monkeypatch.setattr(h, "load", lambda p=path: {k: v for k, v in fresh.items() if k != "seal"})
    assert h.main(["--check"]) == 0 and capsys.readouterr().out == "LM history: matches git\n"
    monkeypatch.setattr(h, "load", lambda p=path: {"interval": "other", "versions": []})
    assert h.main(["--check"]) == 1 and capsys.readouterr().out == "LM history: DIFFERS from git\n"
    assert path.read_text() == json.dumps(fresh, indent=1, sort_keys=True) + "\n"   # --check writes nothing


def test_extract_defaults_a_run_without_lr_factor_to_the_base_step_and_tolerates_missing_keys():
    runs = [dict(estimator=e, d=32, seed=s, auc=0.5 + 0.1 * (e == "gmc") + 0.01 * s * (e == "is"))
            for e in ("gmc", "is") for s in range(2)]
    raw = json.dumps(dict(lm_protocol=dict(version=3), runs=runs)).encode()
    rec = h.extract(3, raw, "abc")
    assert rec["protocol_hash"] is None and rec["verdict"] is None and rec["n_seeds"] == 2
    assert [(r["d"], r["rival"], r["n"], r["holm"]) for r in rec["rows"]] == [(32, "is", 2, None)]
    empty = h.extract(3, json.dumps(dict(lm_protocol=dict(version=3))).encode(), "abc")
    assert empty["rows"] == [] and empty["n_seeds"] == 0
    with pytest.raises(ValueError, match=r"abc:figures/out/fig_llm_delay.json holds LM protocol version None, expected 3"):
        h.extract(3, json.dumps(dict(runs=runs)).encode(), "abc")


def test_extract_rows_in_delay_then_rival_order_and_one_paired_seed_is_not_enough():
    rec = h.extract(7, _sidecar(), "c0ffee")
    assert [(r["d"], r["rival"]) for r in rec["rows"]] == [(8, "is"), (8, "tis"), (32, "is"), (32, "tis")]
    raw = json.loads(_sidecar())
    raw["runs"] = [r for r in raw["runs"] if not (r["estimator"] == "tis" and r["seed"] > 0)]
    rec = h.extract(7, json.dumps(raw).encode(), "c0ffee")
    assert {r["rival"] for r in rec["rows"]} == {"is"}


def test_table_reads_only_d32_and_prints_three_decimals():
    data = {"interval": "95 % paired t", "versions": [h.extract(7, _sidecar(), "c0ffee")]}
    for v in data["versions"]:
        for r in v["rows"]:
            if r["d"] == 8:
                r["delta"] = 9.0
    header, rows, note = h.table(data)
    row = dict(zip(header, rows[0]))
    r = next(x for x in data["versions"][0]["rows"] if x["d"] == 32 and x["rival"] == "tis")
    assert row["gmc − tis, d = 32"] == f"{r['delta']:+.3f} [{r['lo']:+.3f}, {r['hi']:+.3f}]"
    assert row["C9 at LM scale"] == "inconclusive" and header[1] == "gmc − onpolicy, d = 32"
    assert note.endswith("sealed; `python -m figures.report.lm_history --check`).")


def test_from_git_reads_each_versions_sidecar_and_seals_the_body(monkeypatch):
    calls = []

    def fake_run(cmd, cwd=None, capture_output=False, check=False):
        calls.append((cmd, cwd, capture_output, check))
        commit = cmd[2].split(":")[0]
        v = next(v for v, c in h.VERSIONS if c == commit)
        return SimpleNamespace(stdout=_sidecar(version=v))

    from types import SimpleNamespace
    monkeypatch.setattr(h.subprocess, "run", fake_run)
    out = h.from_git(h.ROOT)
    assert [c[0] for c in calls] == [["git", "show", f"{c}:{h.SIDECAR}"] for _, c in h.VERSIONS]
    assert all(c[1] == h.ROOT and c[2] is True and c[3] is True for c in calls)
    body = {"interval": "95 % paired t over the version's seeds (base step size), accuracy AUC",
            "versions": [h.extract(v, _sidecar(version=v), c) for v, c in h.VERSIONS]}
    assert out == {**body, "seal": hashlib.sha256(h._canonical(body)).hexdigest()}


def test_the_seal_is_over_sorted_keys_so_a_written_extract_loads(tmp_path):
    body = {"versions": [h.extract(7, _sidecar(), "c0ffee")], "interval": "x"}   # keys not in sorted order
    assert h._canonical(body) == json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    p = tmp_path / "v.json"
    p.write_text(json.dumps({**body, "seal": hashlib.sha256(h._canonical(body)).hexdigest()}, indent=1, sort_keys=True))
    assert h.load(p) == body


def test_extract_reads_only_the_base_step_size():
    raw = json.loads(_sidecar())
    for r in raw["runs"]:
        if r["lr_factor"] == 3.0:
            r["auc"] += 0.5 * (r["estimator"] == "gmc") + 0.1 * r["seed"]
    rec = h.extract(7, json.dumps(raw).encode(), "c0ffee")
    assert rec == h.extract(7, _sidecar(), "c0ffee") | {"sidecar_sha256": rec["sidecar_sha256"]}


def test_the_tables_note_in_full_and_a_file_without_seal_is_refused(tmp_path):
    _, _, note = h.table({"interval": "IV", "versions": []})
    assert note == ("Exploratory: the LM protocol's earlier versions, each decided on seeds an earlier version had used "
                    "(v2–v7: seeds 0–15); LM protocol v8 asks the question again on fresh seeds and alone feeds the "
                    "headline. Cells: mean accuracy-AUC difference, positive = gmc better, with its IV; in brackets the "
                    "Holm verdict the version registered. Source: each version's report sidecar, read from git "
                    "(lm_versions.json, sealed; `python -m figures.report.lm_history --check`).")
    p = tmp_path / "v.json"
    p.write_text(json.dumps({"interval": "x", "versions": []}))
    with pytest.raises(ValueError, match="seal does not match its content"):
        h.load(p)


def test_main_makes_nested_folders_rewrites_and_documents_its_option(tmp_path, monkeypatch, capsys):
    fresh = _fresh()
    path = tmp_path / "a" / "b" / "lm_versions.json"
    monkeypatch.setattr(h, "from_git", lambda root=h.ROOT: fresh)
    monkeypatch.setattr(h, "PATH", path)
    assert h.main([]) == 0 and h.main([]) == 0 and json.loads(path.read_text()) == fresh   # twice: folder exists
    capsys.readouterr()
    with pytest.raises(SystemExit):
        h.main(["--help"])
    out = capsys.readouterr().out
    assert " ".join(h.__doc__.splitlines()[0].split()) in " ".join(out.split())   # argparse wraps the line
    import re
    assert re.search(r"^\s+--check\s+compare the stored extract with one re-made from git$", out, re.M), out
