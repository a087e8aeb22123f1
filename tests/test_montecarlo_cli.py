"""`python -m simulate bias`: input faults name the option, the printed tables hold no NaN, --help shows defaults."""
import pytest

from simulate.__main__ import build_parser, main
from simulate.montecarlo.tables import _cell


def _run(capsys, *argv):
    rc = main(["bias", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize("opt", ["--G", "--eps", "--delay"])
def test_empty_list_names_the_option(capsys, opt):
    with pytest.raises(SystemExit) as exc:
        main(["bias", opt, ""])
    assert exc.value.code == 2
    assert f"{opt}: give at least one value" in capsys.readouterr().err


def test_empty_estimators_names_the_option(capsys):
    rc, _, err = _run(capsys, "--estimators", "", "--n-groups", "64")
    assert rc == 2 and "--estimators" in err
    rc, _, err = _run(capsys, "--estimators", "gmc,nope", "--n-groups", "64")
    assert rc == 2 and "--estimators" in err and "'nope'" in err


def test_huge_G_is_checked_against_memory_up_front(capsys, monkeypatch):
    import simulate.montecarlo.run as run

    monkeypatch.setattr(run, "available_memory", lambda: 200 * 2**20)
    rc, out, err = _run(capsys, "--G", "1000000", "--n-groups", "64")
    assert rc == 2 and err.startswith("error: --G: ") and "GiB" in err
    assert out == ""  # nothing ran


def test_printed_tables_have_no_nan_and_show_the_decomposition(capsys):
    rc, out, err = _run(capsys, "--instance", "bandit", "--estimators", "gmc,is", "--G", "2,4", "--delay", "0,6",
                        "--n-groups", "256", "--quantities", "all")
    assert rc == 0
    assert "nan" not in out.lower()
    assert "baseline" in out and "weighting" in out
    assert "—" in out  # missing bounds/exact values are shown as a dash


def test_limit_warning_printed_once(capsys, monkeypatch):
    import simulate.montecarlo.tables as tables

    real = tables.exact_table
    monkeypatch.setattr(tables, "exact_table", lambda *a, **k: real(*a, **k, max_count_states=3))
    rc, out, err = _run(capsys, "--instance", "bandit", "--estimators", "gmc", "--G", "4,8", "--delay", "0,4",
                        "--n-groups", "128")
    assert rc == 0
    warn = [ln for ln in err.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1 and "max_count_states = 3" in warn[0]


def test_tiny_negative_round_off_of_a_nonnegative_quantity_prints_as_zero():
    assert _cell(-1e-17, "sq_norm") == "0"
    assert _cell(-1e-17, "chi2") == "-1e-17"  # χ² estimates may be negative: printed as measured
    assert _cell(float("nan"), "sq_norm") == "—"


def test_help_shows_defaults():
    sub = build_parser()._subparsers._group_actions[0].choices["bias"]
    text = sub.format_help()
    for opt in ("--instance", "--estimators", "--eps", "--G", "--delay", "--n-groups", "--eta", "--seed", "--tail",
                "--quantities", "--no-exact", "--out"):
        i = text.index(f"\n  {opt}")  # the option's own entry, not the usage line
        assert "default" in text[i : text.find("\n  --", i + 1)], opt


@pytest.mark.parametrize("n", [2000, 2003])
def test_n_groups_is_run_as_asked_or_the_rounding_is_said(capsys, n):
    """Issue 27 item 16: ``--n-groups 2000`` silently ran 1984 (a multiple of 32 chunks). 2000 now runs
    2000 (25 chunks); a count with no divisor in [8, 32] (a prime) is rounded down and says so."""
    rc, out, err = _run(capsys, "--instance", "bandit", "--estimators", "gmc", "--G", "2", "--delay", "0",
                        "--n-groups", str(n), "--no-exact")
    assert rc == 0
    if n == 2000:
        assert "n = 2000 groups" in out and "rounded" not in err
    else:
        ran = n // 32 * 32
        assert f"n = {ran} groups" in out
        assert f"--n-groups {n} rounded down to {ran}" in err


def test_help_texts_have_no_raw_markup():
    """Issue 27 item 16: ``python -m simulate --help`` printed the docstring's ``…`` markup."""
    parser = build_parser()
    texts = [parser.format_help()] + [p.format_help() for p in parser._subparsers._group_actions[0].choices.values()]
    for text in texts:
        assert "``" not in text, text[:200]
