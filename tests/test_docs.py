"""The repository is self-contained: every document its code and docs cite exists (issue 12).

Three checks over README.md, docs/*.md, the notebooks and every ``*.py`` file (docstrings and
comments; code is not scanned for links, where ``table[0](x)`` would look like one):

1. every relative markdown link ``[text](path#anchor)`` resolves to a file inside the repository,
   and, for a link into a ``.md`` file with an anchor, to an anchor that file defines;
2. nothing points outside the repository at the shared spec directory;
3. every ``THEORY.md §N``, ``THEORY.md §N CK`` or ``THEORY CK`` reference (a bare ``THEORY.md`` or
   ``THEORY`` means ``docs/THEORY.md``) names a section and claim ids that docs/THEORY.md has;
4. in README.md and docs/*.md, code spans that name the toolkit's own things still name something:
   ``tests/x.py::test_y`` (the test exists), ``simulate.montecarlo.bias_table`` (the module exists and
   mentions the name; resolved statically, nothing is imported) and repository paths such as
   ``simulate/llm/protocol.py``.

The checkers are plain functions, also tested on synthetic strings, so a checker that silently finds
nothing fails here instead of passing every file.
"""
from __future__ import annotations

import io
import json
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
THEORY = REPO / "docs" / "THEORY.md"
# Built from pieces so that this file does not itself contain the strings it forbids.
FORBIDDEN = ("/".join(["..", "shared"]), "/".join(["", "work", "shared"]))
_SKIP_DIRS = {".git", ".venv", "results", "build", "dist", "__pycache__", ".pytest_cache", ".hypothesis",
              ".ipynb_checkpoints", "node_modules"}
_TEXT_SUFFIXES = {".py", ".md", ".ipynb", ".toml", ".txt", ".cfg", ".ini", ".yml", ".yaml", ".html", ".json", ".sh"}

# --------------------------------------------------------------------------- checkers

_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, …
_ANCHOR = re.compile(r"""<a\s+(?:id|name)\s*=\s*["']([^"']+)["']""", re.I)
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)
# THEORY reference: optional docs/ prefix and .md suffix, an optional section §N or §N.M, then an
# optional list of claim ids ("§3 C7", "§3, C4", "§1, C5, C9", "THEORY C4").
_THEORY_REF = re.compile(
    r"(?:docs/)?THEORY(?:\.md)?(?:'s)?(?P<tail>(?:[ \t]*,?[ \t]*§[ \t]?\d+(?:\.\d+)?)?(?:[ \t]*,?[ \t]*C\d+\b)*)")
_SECTION_IN_REF = re.compile(r"§[ \t]?(\d+(?:\.\d+)?)")
_CLAIM_IN_REF = re.compile(r"\bC\d+\b")
_SECTION_HEADING = re.compile(r"^#{2,6}\s+§\s?(\d+(?:\.\d+)?)\b", re.M)
_CLAIM_HEADING = re.compile(r"^#{2,6}\s+(C\d+)\b", re.M)


def slug(heading: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (``§``, ``—``, ``(``…), spaces → ``-``."""
    text = re.sub(r"<[^>]+>", "", heading)  # inline HTML such as <a id=…></a>
    text = re.sub(r"[`*_]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every anchor a markdown text defines: explicit ``<a id=…>`` and GitHub heading slugs."""
    return set(_ANCHOR.findall(markdown)) | {slug(h) for h in _HEADING.findall(markdown)}


def markdown_links(text: str) -> list[str]:
    """Targets of the markdown links ``[text](target)`` in ``text`` that point at a repository path.

    URLs (``scheme:``) and same-page anchors (``#…``) are left out; so is anything that does not look
    like a path (no ``/`` and no ``.``), which keeps prose such as ``[0, 1](x)`` out.
    """
    out = []
    for target in _LINK.findall(text):
        if _URL.match(target) or target.startswith("#"):
            continue
        path = target.split("#", 1)[0]
        if "/" in path or "." in path:
            out.append(target)
    return out


def check_links(source: Path, text: str, repo: Path = REPO) -> list[str]:
    """Problems with the relative links of ``text`` (found in file ``source``); empty when all resolve."""
    problems = []
    for target in markdown_links(text):
        path, _, anchor = target.partition("#")
        path = path.split("?", 1)[0]
        resolved = (source.parent / path).resolve() if not path.startswith("/") else Path(path)
        where = f"{source.relative_to(repo) if source.is_relative_to(repo) else source}: link {target!r}"
        if not resolved.is_relative_to(repo):
            problems.append(f"{where} points outside the repository")
        elif not resolved.exists():
            problems.append(f"{where} points at a missing file")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text(encoding="utf-8")):
            problems.append(f"{where}: {resolved.name} has no anchor #{anchor}")
    return problems


def check_forbidden(source: str, text: str) -> list[str]:
    """Lines of ``text`` that reference the shared spec directory outside the repository."""
    return [f"{source}:{i}: references {bad!r}" for i, line in enumerate(text.splitlines(), 1)
            for bad in FORBIDDEN if bad in line]


def theory_targets(theory_md: str) -> tuple[set[str], set[str]]:
    """``(sections, claims)`` that a THEORY.md text defines: ``## §N …`` headings and ``### CK …`` headings."""
    return set(_SECTION_HEADING.findall(theory_md)), set(_CLAIM_HEADING.findall(theory_md))


def theory_refs(text: str) -> list[tuple[str, list[str], list[str]]]:
    """Every THEORY reference in ``text``: ``(matched text, sections, claim ids)``; bare ones have neither."""
    refs = []
    for m in _THEORY_REF.finditer(text):
        tail = m.group("tail")
        refs.append((m.group(0).strip(), _SECTION_IN_REF.findall(tail), _CLAIM_IN_REF.findall(tail)))
    return refs


def check_theory_refs(source: str, text: str, sections: set[str], claims: set[str]) -> list[str]:
    """References in ``text`` to a section or claim id that THEORY.md (``sections``, ``claims``) lacks."""
    problems = []
    for ref, secs, ids in theory_refs(text):
        problems += [f"{source}: {ref!r}: THEORY.md has no section §{s}" for s in secs if s not in sections]
        problems += [f"{source}: {ref!r}: THEORY.md has no claim {c}" for c in ids if c not in claims]
    return problems


def python_prose(code: str) -> str:
    """The comments and string literals (docstrings included) of Python source, one per line."""
    parts = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(code).readline):
            if tok.type in (tokenize.COMMENT, tokenize.STRING) or tok.type == getattr(tokenize, "FSTRING_MIDDLE", -1):
                parts.append(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError) as exc:  # report, never skip silently
        raise ValueError(f"cannot tokenize: {exc}") from exc
    return "\n".join(parts)


def notebook_text(raw: str) -> tuple[str, str]:
    """``(markdown, code prose)`` of an ``.ipynb``: markdown cells, and comments/strings of code cells."""
    nb = json.loads(raw)
    md, code = [], []
    for cell in nb.get("cells", []):
        src = "".join(cell.get("source", []))
        if cell.get("cell_type") == "markdown":
            md.append(src)
        elif cell.get("cell_type") == "code":
            # IPython magics are not Python; drop them before tokenizing
            code.append(python_prose("\n".join(l for l in src.splitlines() if not l.lstrip().startswith(("%", "!")))))
    return "\n\n".join(md), "\n".join(code)


_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_TEST_REF = re.compile(r"\b(tests/[\w/]+\.py)::(\w+\*?)")  # test_C5_* names a family
_PACKAGES = ("asyncgrpo", "simulate", "theory", "figures", "sweep")
_DOTTED = re.compile(r"(?<![\w./])((?:" + "|".join(_PACKAGES) + r")(?:\.\w+)+)")
_TOP_DIRS = ("asyncgrpo", "simulate", "theory", "figures", "sweep", "tests", "notebooks", "docs", "bench",
             "constraints", "examples")
_REPO_PATH = re.compile(r"^(?:" + "|".join(_TOP_DIRS) + r")/[\w./-]*$")


def resolve_dotted(name: str, repo: Path = REPO) -> bool:
    """Whether ``pkg.mod.attr`` names a module of the repository (file or package) and, if an attribute
    follows, whether that module's source mentions it (a definition or a re-export). Static: no import."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        base = repo.joinpath(*parts[:i])
        for cand in (base.with_suffix(".py"), base / "__init__.py"):
            if cand.is_file():
                rest = parts[i:]
                return not rest or re.search(rf"\b{re.escape(rest[0])}\b", cand.read_text(encoding="utf-8")) is not None
        if base.is_dir() and i == len(parts):  # a namespace directory, e.g. a folder of data
            return True
    return False


def check_code_spans(source: str, markdown: str, repo: Path = REPO) -> list[str]:
    """Code spans of ``markdown`` naming a test, a dotted module path or a repository path that does not exist."""
    problems = []
    for span in _CODE_SPAN.findall(markdown):
        for path, test in _TEST_REF.findall(span):
            f = repo / path
            if not f.is_file():
                problems.append(f"{source}: `{span}`: no file {path}")
            elif not re.search(rf"^\s*(?:async\s+)?def {re.escape(test.rstrip('*'))}" + ("" if test.endswith("*") else r"\b"),
                               f.read_text(encoding="utf-8"), re.M):
                problems.append(f"{source}: `{span}`: {path} has no test {test}")
        for name in _DOTTED.findall(span.split("(", 1)[0]):
            if not resolve_dotted(name, repo):
                problems.append(f"{source}: `{span}`: {name} does not resolve in the repository")
        target = span.strip().rstrip("/")
        if _REPO_PATH.match(span.strip()) and "*" not in target and not (repo / target).exists():
            problems.append(f"{source}: `{span}`: no such path in the repository")
    return problems


# --------------------------------------------------------------------------- the repository's files


def repo_files() -> list[Path]:
    """Files of the working tree that git would track (tracked, or untracked and not ignored)."""
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                             capture_output=True, check=True, timeout=60).stdout.decode()
        files = [REPO / p for p in out.split("\0") if p]
    except (OSError, subprocess.SubprocessError):  # not a git checkout (e.g. an sdist): walk, pruning build dirs
        files = [p for p in REPO.rglob("*") if not (_SKIP_DIRS & set(p.relative_to(REPO).parts))
                 and not any(part.endswith(".egg-info") for part in p.parts)]
    return sorted(p for p in files if p.is_file())


def _documents() -> list[tuple[Path, str, str]]:
    """``(path, markdown-ish text, python prose)`` of README.md, docs/*.md, notebooks and every .py."""
    docs = []
    for p in repo_files():
        rel = p.relative_to(REPO)
        if p == Path(__file__).resolve():  # its synthetic bad references exist to be flagged
            continue
        if p.suffix == ".py" and rel.parts[0] == "notebooks":  # jupytext notebooks: the tracked source
            import jupytext

            nb = jupytext.read(p)
            md = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
            docs.append((p, md, python_prose("\n".join(c.source for c in nb.cells if c.cell_type == "code"))))
        elif p.suffix == ".py":
            docs.append((p, "", python_prose(p.read_text(encoding="utf-8"))))
        elif p.suffix == ".ipynb" and rel.parts[0] == "notebooks":
            docs.append((p, *notebook_text(p.read_text(encoding="utf-8"))))
        elif p.suffix == ".md" and (rel == Path("README.md") or rel.parts[0] == "docs"):
            docs.append((p, p.read_text(encoding="utf-8"), ""))
    return docs


@pytest.fixture(scope="module")
def documents():
    return _documents()


@pytest.fixture(scope="module")
def theory_ids():
    assert THEORY.is_file(), "docs/THEORY.md is missing: docstrings cite it"
    return theory_targets(THEORY.read_text(encoding="utf-8"))


def test_theory_md_has_the_spec_numbering(theory_ids):
    sections, claims = theory_ids
    assert {"1", "2", "3", "4"} <= sections
    assert {f"C{i}" for i in range(1, 10)} <= claims
    text = THEORY.read_text(encoding="utf-8")
    # the explicit anchors that other pages link to (#s1 … #s4, #c1 … #c9)
    assert {f"s{i}" for i in range(1, 5)} | {f"c{i}" for i in range(1, 10)} <= anchors(text)


def test_the_scan_sees_the_files_it_must_check(documents):
    names = {p.relative_to(REPO).as_posix() for p, _, _ in documents}
    assert {"README.md", "docs/THEORY.md", "asyncgrpo/estimators/__init__.py", "tests/test_estimators.py"} <= names
    assert any(n.startswith("notebooks/") and n.endswith(".py") for n in names)  # the notebooks' tracked source
    # and it finds THEORY references in them, so an empty scan cannot pass
    assert sum(len(theory_refs(md + prose)) for _, md, prose in documents) > 20


def test_every_relative_link_resolves(documents):
    problems = [msg for p, md, prose in documents for msg in check_links(p, md + "\n" + prose)]
    assert not problems, "\n".join(problems)


def test_nothing_points_at_the_shared_spec_outside_the_repo():
    problems = []
    for p in repo_files():
        if p.suffix in _TEXT_SUFFIXES or p.name in ("Makefile", "run"):
            try:
                text = p.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            problems += check_forbidden(p.relative_to(REPO).as_posix(), text)
    assert not problems, "\n".join(problems)


def test_every_theory_reference_names_an_existing_section_and_claim(documents, theory_ids):
    problems = [msg for p, md, prose in documents
                for msg in check_theory_refs(p.relative_to(REPO).as_posix(), md + "\n" + prose, *theory_ids)]
    assert not problems, "\n".join(problems)


def test_code_spans_in_the_docs_name_existing_tests_modules_and_paths(documents):
    problems = [msg for p, md, _ in documents if p.suffix == ".md"
                for msg in check_code_spans(p.relative_to(REPO).as_posix(), md)]
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the checkers themselves


def test_link_checker_flags_missing_files_outside_paths_and_bad_anchors():
    src = REPO / "docs" / "example.md"
    good = "see [theory](THEORY.md), [C7](THEORY.md#c7), [code](../tests/test_docs.py), [web](https://x.org/a.md)"
    assert check_links(src, good) == []
    bad = "[a](THEORY_missing.md) [b](../../" + "shared/THEORY.md) [c](THEORY.md#c10) [d](../notebooks/nope.py)"
    problems = check_links(src, bad)
    assert len(problems) == 4, problems
    assert "missing file" in problems[0] and "outside the repository" in problems[1]
    assert "no anchor #c10" in problems[2] and "missing file" in problems[3]


def test_link_extraction_ignores_urls_anchors_and_non_paths():
    assert markdown_links("[x](#c7) [y](http://a/b.md) [0, 1](x) ![img](out/a.png) [z](docs/THEORY.md#s2)") == [
        "out/a.png", "docs/THEORY.md#s2"]


def test_forbidden_checker_flags_both_spellings():
    text = "ok\nsee " + FORBIDDEN[0] + "/THEORY.md\nand " + FORBIDDEN[1] + "/x\n"
    assert [m.split(":")[1] for m in check_forbidden("f", text)] == ["2", "3"]
    assert check_forbidden("f", "docs/THEORY.md and shared state") == []


@pytest.mark.parametrize("text, want", [
    ("(THEORY.md §3 C7)", [("3",), ("C7",)]),
    ("THEORY §1, C5, C9", [("1",), ("C5", "C9")]),
    ("docs/THEORY.md §4", [("4",), ()]),
    ("THEORY C4 bounds", [(), ("C4",)]),
    ("THEORY's C4 bounds", [(), ("C4",)]),
    ("THEORY.md §2.", [("2",), ()]),
    ("as THEORY.md defines", [(), ()]),
])
def test_theory_reference_parser(text, want):
    (_, secs, ids), = theory_refs(text)
    assert (tuple(secs), tuple(ids)) == (want[0], want[1])


def test_theory_checker_flags_unknown_sections_and_claims(theory_ids):
    sections, claims = theory_ids
    assert check_theory_refs("f", "THEORY.md §3 C7, THEORY §2, docs/THEORY.md §4, THEORY.md", sections, claims) == []
    bad = check_theory_refs("f", "see THEORY.md §5 and THEORY.md §3 C10 and THEORY §2.7", sections, claims)
    assert len(bad) == 3 and "§5" in bad[0] and "C10" in bad[1] and "§2.7" in bad[2], bad


def test_python_prose_keeps_docstrings_and_comments_only():
    code = '"""Doc [a](x/missing.md)."""\nfuncs = [f]\ny = funcs[0](3)  # see THEORY.md §9\n'
    prose = python_prose(code)
    assert "x/missing.md" in prose and "THEORY.md §9" in prose and "funcs[0](3)" not in prose
    assert check_links(REPO / "m.py", prose) and check_theory_refs("m.py", prose, {"3"}, {"C1"})


def test_slug_follows_github_rules():
    assert slug("§3 Claims and how each is checked") == "3-claims-and-how-each-is-checked"
    assert slug("C7 — G → ∞ with fixed behaviour") == "c7--g---with-fixed-behaviour"


def test_code_span_checker_flags_missing_tests_names_and_paths():
    good = ("`tests/test_docs.py::test_slug_follows_github_rules`, `tests/test_docs.py::test_code_span*`, `simulate.montecarlo.bias_table(df)`, "
            "`asyncgrpo.estimators.IN_CLASS`, `python -m simulate.llm experiment`, `docs/THEORY.md`, `results/cells/`")
    assert check_code_spans("f", good) == []
    bad = ("`tests/test_docs.py::test_no_such_test*` `tests/test_nope.py::test_x` `simulate.montecarlo.no_such_name` "
           "`theory.no_such_module` `docs/NOPE.md`")
    problems = check_code_spans("f", bad)
    assert len(problems) == 5, problems
    assert "has no test" in problems[0] and "no file" in problems[1] and "no such path" in problems[4]
