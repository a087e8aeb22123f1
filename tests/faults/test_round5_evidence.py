"""Issue 56 items 1–2: the report never judges a claim from missing, unreadable, truncated or mismatched evidence,
and its stamp says what made the numbers (the sidecars' commit, code and protocol hashes), not the rebuilding code.

Each sidecar the report reads (figures.report.data.EXPECTED) is damaged in turn, five ways; the rows it judges
must come out ``not run (evidence missing: <file>, …)`` and ``python -m figures.report`` must exit 1 naming it."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from figures.report import __main__ as cli
from figures.report import data, render

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "figures" / "out"
DAMAGES = ("truncate", "empty", "delete", "edit-stamp", "swap-protocol")


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    """A copy of the committed sidecars (JSON only: the report needs no PNG to judge)."""
    if not (OUT / "fig_c9_protocol.json").exists():
        pytest.fail("figures/out lacks the committed sidecars")
    d = tmp_path_factory.mktemp("out")
    for p in OUT.glob("*.json"):
        shutil.copy(p, d / p.name)
    return d


def _damage(folder: Path, name: str, how: str, *, sealed: bool = False) -> None:
    p = folder / f"{name}.json"
    raw = p.read_text()
    if how == "truncate":
        p.write_text(raw[: len(raw) // 2])
    elif how == "empty":
        p.write_text("")
    elif how == "delete":
        p.unlink()
    else:
        meta = json.loads(raw)
        if how == "edit-stamp":
            meta["code_version"] = "0123456789abcdef"
        else:  # another registered protocol's name and hash
            meta["protocol"] = {**(meta.get("protocol") or {}), "name": "training-claims-v4",
                                "sha256": data.registered_protocols()["training-claims-v4"]}
        p.write_text(json.dumps(meta))


def _copy(src: Path, dst: Path, *, sealed: bool) -> Path:
    """The sidecars of ``src``, each sealed or each unsealed (the committed ones may be either, by when they were
    made), so both paths of the loader run whatever is committed."""
    dst.mkdir()
    for p in src.glob("*.json"):
        meta = json.loads(p.read_text())
        meta.pop("seal", None)
        if sealed:
            meta["seal"] = data.seal(meta)
        (dst / p.name).write_text(json.dumps(meta))
    return dst


def _rewrite(p: Path, meta: dict) -> None:
    """Write an edited sidecar, re-sealed when it was sealed: the edit under test must be caught by the check it
    targets, not by the seal."""
    if "seal" in meta:
        meta["seal"] = data.seal(meta)
    p.write_text(json.dumps(meta))


def _present(folder: Path) -> tuple[str, ...]:
    """The sidecars in ``folder`` (the committed set may lag the figure modules until the next full run)."""
    return tuple(sorted(p.stem for p in folder.glob("*.json")))


def test_expected_names_every_figure_and_every_claim_of_the_committed_sidecars():
    assert set(data.expected_figures()) <= set(data.EXPECTED), "a new figure: add the rows it judges to EXPECTED"
    assert set(_present(OUT)) <= set(data.expected_figures())
    for p in OUT.glob("*.json"):
        meta = json.loads(p.read_text())
        ids = {data.TRAINING_IDS.get((meta["figure"], e["claim"]), e["claim"]) for e in meta["evidence"]}
        assert ids <= set(data.EXPECTED[p.stem]), (p.name, ids)


def test_a_figure_module_without_its_sidecar_is_missing(committed, tmp_path):
    shutil.copytree(committed, tmp_path / "out")
    (tmp_path / "out" / "fig_c6_overlap.json").unlink()
    problems = data.check_evidence(tmp_path / "out")[1]  # default: every figure module's sidecar
    assert {"file": "fig_c6_overlap.json", "reason": "no such file", "rows": ["C6"]} in problems
    assert {pb["file"] for pb in problems} == {f"{n}.json" for n in data.expected_figures()} - {
        f"{n}.json" for n in _present(tmp_path / "out")}


def test_the_committed_sidecars_are_whole_and_the_stamp_is_theirs(committed, tmp_path):
    sidecars, problems = data.check_evidence(committed, expected=_present(committed))
    assert problems == [] and len(sidecars) == len(_present(committed))
    rep = data.build(committed, quick=False, run_checks=False, provenance={"commit": "f" * 40, "dirty": False},
                     report_path=tmp_path / "R.md", expected=_present(committed))
    made = {(json.loads(p.read_text())["git_commit"], json.loads(p.read_text())["code_version"])
            for p in committed.glob("*.json")}
    head = " ".join(b[1] for b in render._head(rep) if b[0] == "p")
    for commit, code in made:  # every maker listed (the committed fig1 was re-measured by a later commit)
        assert f"git `{commit[:12]}`{'-dirty' if commit.endswith('-dirty') else ''}, code `{code}`" in head
    assert rep["not_run"] == {}
    if rep["rebuilt_by"]["code"] not in {code for _, code in made}:  # the rebuilding code is never named as a maker
        assert f"code `{rep['rebuilt_by']['code']}`" not in head.split("Report written")[0]
    if any(rep["rebuilt_by"]["code"] != code for _, code in made):  # rebuilt by other code: said so
        assert "not the code that made the numbers" in head


def test_an_unsealed_stamp_is_checked_against_git(committed):
    """A clean-tree stamp names a commit whose files hash to the stamped code: 3e8f6e1 made code 416d18cd."""
    assert data.code_at("3e8f6e12661204ab473bdb722891ef7f6bf87f53") == "416d18cd92d66ffb"
    assert data.code_at("0" * 40) is False


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("how", DAMAGES)
def test_each_damaged_sidecar_leaves_its_claims_not_run(committed, tmp_path, how, sealed):
    src = _copy(committed, tmp_path / "clean", sealed=sealed)
    present = _present(src)
    assert data.check_evidence(src, expected=present)[1] == []
    for name in present:
        rows = data.EXPECTED[name]
        if how == "edit-stamp" and not sealed and json.loads((src / f"{name}.json").read_text())["git_commit"].endswith(
                "-dirty"):  # unsealed and from a dirty tree: nothing to check an edit against; the stamp says so
            assert "dirty tree: stamp unverified" in render._head(data.build(src, quick=False, run_checks=False,
                                                                 report_path=src / "R.md", expected=present))[0][1]
            continue
        d = tmp_path / f"{name}-{how}"
        shutil.copytree(src, d)
        _damage(d, name, how)
        rep = data.build(d, quick=False, run_checks=False, provenance={"commit": "f" * 40, "dirty": False},
                         report_path=d / "R.md", expected=present)
        files = {pb["file"] for pb in rep["evidence_problems"]}
        assert f"{name}.json" in files, (name, how, rep["evidence_problems"])
        for r in rows:
            assert rep["not_run"][r].startswith(f"not run (evidence missing: "), (name, how, r)
            assert f"{name}.json" in rep["not_run"][r]
        assert name not in {m["figure"] for m in rep["sidecars"]}  # never judged from what is left of it
        text = "\n".join(str(b[1]) for b in render._head(rep))
        assert f"`{name}.json`" in text and "not run (evidence missing: " in text
        shutil.rmtree(d)


@pytest.mark.parametrize("how", DAMAGES)
def test_the_command_exits_1_and_names_the_damaged_sidecar(committed, tmp_path, capsys, how):
    d = tmp_path / "out"
    shutil.copytree(committed, d)
    _damage(d, "fig_c9_protocol", how)
    assert cli.main(["--out", str(d), "--report", str(tmp_path / "R.md"), "--no-derive"]) == 1
    printed = capsys.readouterr().out
    assert "problem: evidence fig_c9_protocol.json:" in printed
    assert "C9" in printed.split("problem: evidence fig_c9_protocol.json:")[1].splitlines()[0]
    assert "not run (evidence missing: fig_c9_protocol.json" in (tmp_path / "R.md").read_text()


def test_an_empty_folder_names_every_missing_sidecar(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    assert cli.main(["--out", str(tmp_path / "out"), "--report", str(tmp_path / "R.md"), "--no-derive"]) == 1
    printed = capsys.readouterr().out
    for name in data.expected_figures():
        assert f"problem: evidence {name}.json: no such file" in printed


@pytest.mark.parametrize("field,value", [("evidence", "oops"), ("evidence", [1, 2]), ("c9", [1]), ("sections", {}),
                                         ("git_commit", 7), ("protocol", {"name": "x", "sha256": "zz"})])
def test_a_malformed_field_is_a_named_problem_not_a_traceback(committed, tmp_path, field, value):
    shutil.copytree(committed, tmp_path / "out")
    p = tmp_path / "out" / "fig5_delay.json"
    meta = json.loads(p.read_text())
    meta[field] = value
    p.write_text(json.dumps(meta))
    rep = data.build(tmp_path / "out", quick=False, run_checks=False, provenance={"commit": "f" * 40, "dirty": False},
                     report_path=tmp_path / "R.md", expected=_present(tmp_path / "out"))
    (pb,) = rep["evidence_problems"]
    assert pb["file"] == "fig5_delay.json" and field.split("_")[0] in pb["reason"]
    assert rep["not_run"]["C4"].startswith("not run (evidence missing: fig5_delay.json")


def test_a_sealed_sidecar_with_an_edited_number_is_refused(committed, tmp_path):
    d = _copy(committed, tmp_path / "out", sealed=True)
    p = d / "fig3_second_moment.json"
    meta = json.loads(p.read_text())
    meta["evidence"][0]["measured"] = 0.0
    p.write_text(json.dumps(meta))
    (pb,) = data.check_evidence(d, expected=_present(d))[1]
    assert pb["file"] == p.name and "seal mismatch" in pb["reason"]


def test_save_seals_what_it_writes_and_the_loader_accepts_it(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from figures import common

    fig, _ = plt.subplots()
    meta = common.sidecar("fig_mine", quick=True, settings={"x": float("nan")}, seeds=[1],
                          evidence=[common.Evidence("C1", "q", "p", 0.5, 0.1, 1.0, "holds", "fig_mine")])
    common.save(fig, tmp_path, "fig_mine", meta)
    saved = json.loads((tmp_path / "fig_mine.json").read_text())
    assert saved["seal"] == data.seal(saved)
    sidecars, problems = data.check_evidence(tmp_path, expected=())
    assert problems == [] and sidecars[0]["_sealed"]


def test_a_not_run_verdict_cell_is_a_defined_state_for_the_text_check():
    from figures.report import check

    table = "| claim | verdict |\n|---|---|\n| C9 | not run (evidence missing: fig_c9_protocol.json, empty file) |\n"
    assert check.problems(table) == []
    assert check.problems(table.replace("not run (evidence missing:", "not run (whatever:")) != []


def test_the_verdict_table_itself_reads_not_run(committed, tmp_path):
    d = tmp_path / "out"
    shutil.copytree(committed, d)
    _damage(d, "fig_c9_protocol", "empty")
    rep = data.build(d, quick=False, run_checks=False, provenance={"commit": "f" * 40, "dirty": False},
                     report_path=tmp_path / "R.md", expected=_present(d))
    rows = {r[0].split("**")[1] + r[0].split("**")[2].split(" ")[0]: r[2] for r in render.claim_rows(rep)}
    assert rows["C9"].startswith(data.NOT_RUN_PREFIX + "fig_c9_protocol.json, empty file")


DEEPER = {  # sidecar, edit, what the problem line says
    "c9 emptied": ("fig_c9_protocol", lambda m: m.update(c9={}), "'c9' is missing or empty"),
    "evidence rows removed": ("fig3_second_moment", lambda m: m.update(evidence=[]), "'evidence' is missing or empty"),
    "a measurement as text": ("fig3_second_moment", lambda m: m["evidence"][0].update(measured="abc"),
                              "measured 'abc' is not a number"),
    "a verdict outside the vocabulary": ("fig1_bias_vs_G", lambda m: m["evidence"][0].update(verdict="violated"),
                                         "is not a verdict word"),
    "stamp keys deleted": ("fig5_delay", lambda m: [m.pop("git_commit"), m.pop("code_version")],
                           {False: "no stamp (git_commit, code_version) among stamped sidecars",
                            True: "stamp: git_commit None is not a 40-hex commit; stamp: code_version None is not a "
                                  "16-hex code hash"}),
    "nested table of the wrong shape": ("fig_c5_protocol", lambda m: m["c5"].update(per_instance=[1]),
                                        "malformed content: the report raised"),
}


@pytest.mark.parametrize("sealed", [False, True], ids=["unsealed", "sealed"])
@pytest.mark.parametrize("case", list(DEEPER))
def test_content_damaged_below_the_top_level_is_named_not_judged(committed, tmp_path, capsys, case, sealed):
    name, edit, says = DEEPER[case]
    says = says[sealed] if isinstance(says, dict) else says  # a sealed stamp is checked by its structure
    d = _copy(committed, tmp_path / "out", sealed=sealed)
    meta = json.loads((d / f"{name}.json").read_text())
    edit(meta)
    _rewrite(d / f"{name}.json", meta)
    assert cli.main(["--out", str(d), "--report", str(tmp_path / "R.md"), "--no-derive"]) == 1
    line = next(ln for ln in capsys.readouterr().out.splitlines() if f"problem: evidence {name}.json:" in ln)
    assert says in line
    assert f"not run (evidence missing: {name}.json" in (tmp_path / "R.md").read_text()


def test_protocol_v6_stamp_is_checked_against_its_registered_file(committed, tmp_path):
    reg = data.registered_protocols()
    name = next(n for n in reg if n.endswith("v6")) if any(n.endswith("v6") for n in reg) else next(iter(reg))
    d = tmp_path / "out"
    shutil.copytree(committed, d)
    p = d / "fig_regime_slices.json"
    meta = json.loads(p.read_text())
    meta["v6"] = {"name": name, "sha256": reg[name]}
    _rewrite(p, meta)
    assert data.check_evidence(d, expected=_present(d))[1] == []  # the registered pair: whole
    meta["v6"]["sha256"] = "ab" * 32
    _rewrite(p, meta)
    # (the committed fig_protocol_v6 sidecar carries the registered stamp: the edited one is the problem named)
    (pb,) = [x for x in data.check_evidence(d, expected=_present(d))[1] if x["file"] == p.name]
    assert "is not its registered file's" in pb["reason"]


def test_an_unsealed_sidecar_just_written_by_this_tree_is_its_own_proof(tmp_path, monkeypatch):
    """A clean-commit stamp whose code hash is this tree's (untracked code files change it) is not an edit."""
    import subprocess

    import sweep

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(sweep, "git_commit", lambda: head)
    monkeypatch.setattr(sweep, "code_version", lambda *a, **k: "0123456789abcdef")
    meta = {"figure": "fig_mine", "evidence": [], "git_commit": head, "code_version": "0123456789abcdef"}
    (tmp_path / "fig_mine.json").write_text(json.dumps(meta))
    sidecars, problems = data.check_evidence(tmp_path, expected=())
    assert problems == [] and sidecars[0]["_verified"]
    meta["code_version"] = "fedcba9876543210"  # another tree's, or an edit: checked against git, refused
    (tmp_path / "fig_mine.json").write_text(json.dumps(meta))
    (pb,) = data.check_evidence(tmp_path, expected=())[1]
    assert "stamp mismatch" in pb["reason"]
