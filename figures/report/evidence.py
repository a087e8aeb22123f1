"""Evidence integrity (issue 56): which sidecars a full report expects and which rows each judges, the seal and the
stamps (commit, code hash, protocol hash) validated on load, and the rows a missing or damaged sidecar leaves
"not run" — so the report never judges a claim from damaged or missing evidence."""
from __future__ import annotations

import json
import re
from pathlib import Path

from figures.report.names import CLAIM_IDS, DASH, INFO, TRAINING_IDS

#: Figures renamed (issue 34: numbering 1–5); an old sidecar is ignored once its new one exists beside it.
RENAMED = {"fig6_eps_G_heatmap": "fig4_eps_G_heatmap", "fig7_delay": "fig5_delay"}

#: Every sidecar a full report reads → the report rows it judges: verdict-table labels (``claims.ROWS``) and
#: answer-table groups (``answer.GROUPS``, prefixed ``answer:``). A claim whose sidecar is missing, unreadable or
#: mismatched is not judged: it reads ``not run (evidence missing: <file>, <reason>)`` (issue 56). A test
#: (tests/faults/test_round5_evidence.py) checks this table against the committed sidecars' own claim ids.
EXPECTED = {
    "fig1_bias_vs_G": ("C7", "C8"),
    "fig2_bias_vs_eps": ("C2", "C4", "C4-rate"),
    "fig3_second_moment": ("C1",),
    "fig4_eps_G_heatmap": ("C5",),
    "fig5_delay": ("C4", "C6"),
    "fig_bridge": ("answer:toy-ladder",),
    "fig_c5_local_exponent": ("C5",),
    "fig_c5_protocol": ("C5-T",),
    "fig_c6_overlap": ("C6",),
    "fig_c9_protocol": ("C9", "answer:tabular", "answer:toy-lm-faithful"),
    "fig_llm_delay": ("C9", "answer:cpu-lm"),
    "fig_regime_map": ("C9", "answer:tabular"),
    "fig_regime_slices": ("C9",),
    "fig_protocol_v6": ("answer:tabular-family", "answer:lm-like-family"),
    "fig_eps_G_advice": ("guidance: choosing ε and G",),
}


def expected_figures() -> tuple[str, ...]:
    """The sidecar name (``NAME = "…"``) of every ``figures/fig_*.py`` module, sorted: what a full run writes, read
    from the sources without importing them (a new figure is expected as soon as it exists)."""
    here = Path(__file__).resolve().parents[1]
    names = []
    for p in sorted(here.glob("fig_*.py")):
        m = re.search(r"""^NAME\s*=\s*["']([^"']+)["']""", p.read_text(encoding="utf-8"), re.M)
        names.append(m.group(1) if m else p.stem)
    return tuple(sorted(names))
#: Sidecar keys that stamp the protocol a figure ran (``{"name", "sha256", …}``): C5/C9's and protocol v6's.
PROTOCOL_KEYS = ("protocol", "v6")
#: The seal of a sidecar (:func:`seal`): SHA-256 of its canonical JSON without the ``seal`` key.
SEAL_ALGORITHM = "sha256/canonical-json-v1"
#: Keys :func:`check_evidence` adds to a loaded sidecar (never in the file, never sealed).
LOADER_KEYS = ("_png", "_file", "_sealed", "_verified")
_CODE_AT: dict[str, str | bool | None] = {}


def _this_tree(meta: dict) -> bool:
    """The sidecar's stamp is this working tree's: its commit is HEAD and its code hash the current one (a clean tree
    with untracked code files hashes differently from its commit)."""
    from sweep import code_version, git_commit

    return meta.get("git_commit") == git_commit() and meta.get("code_version") == code_version()


def code_at(commit: str) -> str | bool | None:
    """``sweep.code_version`` of ``commit``'s committed files (read from git, the working tree untouched): the code
    hash a clean-tree run at that commit stamps. ``False``: git does not know the commit; ``None``: no git here."""
    import hashlib
    import subprocess

    from sweep import DEFAULT_CODE_PACKAGES

    if commit in _CODE_AT:
        return _CODE_AT[commit]
    root = Path(__file__).resolve().parents[2]

    def git(*args, data=None):
        return subprocess.run(["git", *args], cwd=root, input=data, capture_output=True, timeout=60)

    try:
        if git("rev-parse", "--git-dir").returncode != 0:
            return None
        if not _HEX.match(commit) or git("cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
            _CODE_AT[commit] = False
            return False
        names = git("ls-tree", "-r", "--name-only", commit, "--", *DEFAULT_CODE_PACKAGES).stdout.decode().splitlines()
        ordered = []
        for pkg in DEFAULT_CODE_PACKAGES:  # the order and paths sweep.code_version hashes
            ordered += sorted((n for n in names if n.startswith(pkg + "/") and n.endswith(".py")
                               and "__pycache__" not in n), key=lambda n: Path(n).parts)
        out = git("cat-file", "--batch", data="".join(f"{commit}:{n}\n" for n in ordered).encode()).stdout
        h, pos = hashlib.sha256(), 0
        for n in ordered:  # "<sha> blob <size>\n<bytes>\n" per file
            head_end = out.index(b"\n", pos)
            size = int(out[pos:head_end].split()[2])
            blob = out[head_end + 1:head_end + 1 + size]
            pos = head_end + 1 + size + 1
            h.update(n.encode())
            h.update(b"\0")
            h.update(blob)
            h.update(b"\0")
    except (OSError, subprocess.SubprocessError):
        return None
    _CODE_AT[commit] = h.hexdigest()[:16]
    return _CODE_AT[commit]
_HEX = re.compile(r"^[0-9a-f]+$")


def canonical(meta: dict) -> bytes:
    """The bytes a seal hashes: ``meta`` without its ``seal`` (and the keys the loader adds), keys sorted, compact."""
    body = {k: v for k, v in meta.items() if k != "seal" and k not in LOADER_KEYS}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


def seal(meta: dict) -> dict:
    """``{"algorithm", "sha256"}`` over :func:`canonical` ``(meta)``: stored in the sidecar by ``figures.common.save``,
    so an edited stamp (commit, code hash, protocol) or an edited number breaks it."""
    import hashlib

    return {"algorithm": SEAL_ALGORITHM, "sha256": hashlib.sha256(canonical(meta)).hexdigest()}


def stamp(meta: dict) -> dict:
    """What made a sidecar: ``{"commit", "code", "protocols"}`` (protocols: ``name@sha256`` of each protocol key)."""
    prs = [meta[k] for k in PROTOCOL_KEYS if isinstance(meta.get(k), dict)]
    names = [f"{pr.get('name')}@{pr.get('sha256')}" for pr in prs]
    lm = meta.get("lm_protocol")
    if isinstance(lm, dict) and meta.get("protocol_hash"):  # the LM row's protocol: hashed by simulate.llm.protocol
        names.append(f"{lm.get('name')}-v{lm.get('version')}@{meta['protocol_hash']}")
    return {"commit": str(meta.get("git_commit")), "code": str(meta.get("code_version")), "protocols": names}


def registered_protocols() -> dict[str, str]:
    """``{name: sha256}`` of the pre-registered protocol files (``simulate/protocol/protocol*.toml``)."""
    import hashlib
    import tomllib

    import simulate.protocol as sp

    out = {}
    for p in sorted(Path(sp.__file__).parent.glob("protocol*.toml")):
        raw = p.read_bytes()
        try:
            name = tomllib.loads(raw.decode()).get("name")
        except (tomllib.TOMLDecodeError, UnicodeDecodeError):
            continue
        if isinstance(name, str):
            out.setdefault(name, hashlib.sha256(raw).hexdigest())
    return out


def _kind(v, kinds, what: str) -> str | None:
    return None if isinstance(v, kinds) else f"{what} is {type(v).__name__}, not {' or '.join(k.__name__ for k in kinds)}"


#: Keys a full run's sidecar always has, non-empty (the rows it judges are read from them).
REQUIRED = {**{stem: ("evidence",) for stem, rows in EXPECTED.items() if any(not r.startswith("answer:") for r in rows)},
            "fig_c9_protocol": ("evidence", "c9", "protocol"), "fig_c5_protocol": ("evidence", "c5", "protocol"),
            "fig_c6_overlap": ("evidence", "c6"), "fig_c5_local_exponent": ("evidence", "ranges"),
            "fig_regime_map": ("evidence", "comparisons"), "fig_llm_delay": ("evidence", "runs"),
            "fig_eps_G_advice": ("advice", "sections"), "fig_protocol_v6": ("answer", "v6")}


def _row_problem(ev: dict, strict: bool = False) -> str | None:
    """Why one evidence row cannot be read (``None`` when it can): a number that is not one, a label that is not text,
    and (``strict``) a verdict word outside the vocabulary (else the claim rows raise on it, as a figure's own bug)."""
    from simulate import verdicts as vd

    v = ev.get("verdict", "")
    if not isinstance(v, str) or (strict and v and v != INFO and not vd.is_verdict(v)):
        return f"verdict {v!r} is not a verdict word ({', '.join(vd.VERDICTS)}) nor {INFO!r}"
    for k in ("measured", "se", "bound"):
        x = ev.get(k)
        if x is not None and (isinstance(x, bool) or not isinstance(x, (int, float))):
            return f"{k} {x!r} is not a number"
    for k in ("quantity", "point", "note", "figure"):
        if ev.get(k) is not None and not isinstance(ev[k], str):
            return f"{k} is {type(ev[k]).__name__}, not text"
    return None


def structure_problems(meta, strict: bool = False) -> list[str]:
    """Why a parsed sidecar cannot be read as one (empty when it can): the fields the report reads, their types,
    a well-formed stamp, and the seal when it has one."""
    if not isinstance(meta, dict):
        return [f"top level is {type(meta).__name__}, not an object"]
    out = []
    if not isinstance(meta.get("figure"), str):
        out.append("no 'figure' name")
    for key, kinds in (("evidence", (list,)), ("missing", (list,)), ("sections", (list,)), ("answer", (list,)),
                       ("appendix_tables", (list,)), ("c9", (dict,)), ("c5", (dict,)), ("c6", (dict,)),
                       ("protocol", (dict,)), ("settings", (dict,)), ("estimator_plugins", (dict,))):
        if meta.get(key) is not None and (why := _kind(meta[key], kinds, f"'{key}'")):
            out.append(why)
    for i, ev in enumerate(meta.get("evidence") or [] if isinstance(meta.get("evidence"), list) else []):
        if not isinstance(ev, dict) or not isinstance(ev.get("claim"), str):
            out.append(f"evidence row {i} is not an object with a 'claim'")
            break
        if why := _row_problem(ev, strict):
            out.append(f"evidence row {i} ({ev['claim']}): {why}")
            break
    name = meta.get("figure")
    for key in REQUIRED.get(name, ()) if strict and isinstance(name, str) and _stamped(meta) else ():  # a figure run's
        if not meta.get(key):  # absent or empty: the claim would be judged as if nothing had been measured
            out.append(f"'{key}' is missing or empty (a {name} sidecar always has it)")
    for key in ("sections", "answer", "appendix_tables"):
        if isinstance(meta.get(key), list) and not all(isinstance(x, dict) for x in meta[key]):
            out.append(f"'{key}' holds a non-object")
    commit, code = meta.get("git_commit"), meta.get("code_version")
    sealed = "seal" in meta
    if (commit is not None or sealed) and not (commit == "unknown" or (
            isinstance(commit, str) and len(commit.removesuffix("-dirty")) == 40 and _HEX.match(commit.removesuffix("-dirty")))):
        out.append(f"stamp: git_commit {commit!r} is not a 40-hex commit")
    if (code is not None or sealed) and not (isinstance(code, str) and len(code) == 16 and _HEX.match(code)):
        out.append(f"stamp: code_version {code!r} is not a 16-hex code hash")
    for pkey in PROTOCOL_KEYS:
        pr = meta.get(pkey)
        if isinstance(pr, dict) and ("sha256" in pr or sealed) and not (
                isinstance(pr.get("name"), str) and isinstance(pr.get("sha256"), str) and len(pr["sha256"]) == 64
                and _HEX.match(pr["sha256"])):
            out.append(f"stamp: '{pkey}' lacks a name or a 64-hex sha256")
    if "seal" in meta:
        sl = meta["seal"]
        if not (isinstance(sl, dict) and sl.get("algorithm") == SEAL_ALGORITHM and isinstance(sl.get("sha256"), str)):
            out.append(f"seal is not {{'algorithm': {SEAL_ALGORITHM!r}, 'sha256': …}}")
        elif sl["sha256"] != seal(meta)["sha256"]:
            out.append(f"seal mismatch: content hashes to {seal(meta)['sha256'][:12]}, the sidecar says "
                       f"{sl['sha256'][:12]} (edited after it was written)")
    return out


def _stamped(meta: dict) -> bool:
    return any(k in meta for k in ("git_commit", "code_version", "seal"))


def read_sidecar(p: Path, strict: bool = False) -> tuple[dict | None, str | None]:
    """``(meta, None)`` for a readable, well-formed sidecar, else ``(None, reason)``."""
    try:
        raw = p.read_bytes()
    except OSError as exc:
        return None, f"unreadable ({exc.strerror or exc})"
    if not raw.strip():
        return None, "empty file"
    try:
        meta = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except json.JSONDecodeError as exc:
        return None, (f"truncated JSON (ends at byte {len(raw)})" if exc.pos >= len(raw.rstrip()) - 1
                      else f"invalid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})")
    bad = structure_problems(meta, strict)
    return (None, "; ".join(bad)) if bad else (meta, None)


def check_evidence(out_dir, expected=None, exclude: dict | None = None,
                   strict: bool = False) -> tuple[list[dict], list[dict]]:
    """``(sidecars, problems)``: the readable, consistent sidecars of ``out_dir`` (name order) and one problem
    ``{"file", "reason", "rows"}`` per expected sidecar that is missing, unreadable, truncated, malformed, whose
    seal does not match its content, or whose protocol is not the one its siblings (or its registered file) name.
    ``expected``: sidecar stems that must be there (default :func:`expected_figures`; ``()``: none required); ``exclude``:
    ``{stem: reason}`` of sidecars found damaged otherwise (the report raised reading them), left out the same way;
    ``strict`` (``python -m figures.report``): an evidence row's verdict word and the keys a full run's sidecar always
    has (:data:`REQUIRED`) are checked here too (the library default leaves them to the claim rows, so that a test's
    hand-made sidecar with a figure's name still reads)."""
    out_dir = Path(out_dir)
    expected = expected_figures() if expected is None else tuple(expected)
    sidecars, problems = [], []

    def problem(name, reason, meta=None):
        rows = list(EXPECTED.get(name, ()))
        for ev in (meta or {}).get("evidence") or []:
            cid = TRAINING_IDS.get((name, ev.get("claim")), ev.get("claim"))
            if cid in CLAIM_IDS and cid not in rows:
                rows.append(cid)
        problems.append({"file": f"{name}.json", "reason": reason, "rows": rows})

    seen = set()
    for p in sorted(out_dir.glob("*.json")):
        if p.stem in RENAMED and (p.parent / f"{RENAMED[p.stem]}.json").exists():
            continue
        meta, why = read_sidecar(p, strict)
        if why is None and p.stem in (exclude or {}):
            meta, why = None, exclude[p.stem]
        if why is not None:
            seen.add(p.stem)
            problem(p.stem, why)
            continue
        if meta["figure"] != p.stem and p.stem in EXPECTED:
            seen.add(p.stem)
            problem(p.stem, f"names figure {meta['figure']!r}, not {p.stem!r}", meta)
            continue
        seen.add(meta["figure"])
        meta["_png"] = p.with_suffix(".png") if p.with_suffix(".png").exists() else None
        meta["_file"] = p.name
        meta["_sealed"] = "seal" in meta
        sidecars.append(meta)
    for name in expected:
        if name not in seen:
            problem(name, "no such file")
    # a figure run stamps every sidecar: an unstamped one among stamped ones lost its stamp (edited) or is hand-made
    if any(_stamped(m) for m in sidecars):
        for m in [m for m in sidecars if not _stamped(m)]:
            problem(m["figure"], "no stamp (git_commit, code_version) among stamped sidecars: not as a figure run "
                                 "wrote it", m)
            sidecars.remove(m)
    # an unsealed sidecar (written before seals) cannot prove its stamp by itself: a clean-tree stamp is checked
    # against git (the code hash of the named commit's files); a dirty-tree one cannot be checked and says so
    for m in list(sidecars):
        if m["_sealed"] or m.get("git_commit") in (None, "unknown") or str(m["git_commit"]).endswith("-dirty"):
            m["_verified"] = m["_sealed"]
            continue
        actual = code_at(m["git_commit"])
        if actual != m.get("code_version") and _this_tree(m):  # just written here: untracked code files count too
            actual = m.get("code_version")
        m["_verified"] = isinstance(actual, str) and actual == m.get("code_version")
        if actual is None:  # no git here: nothing to check against
            continue
        if actual is False:
            problem(m["figure"], f"stamp names commit {m['git_commit'][:12]}, which this repository does not have "
                                 "(edited stamp?)", m)
        elif actual != m.get("code_version"):
            problem(m["figure"], f"stamp mismatch: code_version {m.get('code_version')} is not the code of commit "
                                 f"{m['git_commit'][:12]} ({actual}): edited after it was written, or written from a tree "
                                 "with uncommitted code files", m)
        else:
            continue
        sidecars.remove(m)
    # one protocol per key: the sidecars that ran it agree (C5 and C9: "protocol"; v6: "v6"), and a registered name
    # carries its file's hash
    reg = registered_protocols()
    bad = set()
    for pkey in PROTOCOL_KEYS:
        protos = {m["figure"]: m[pkey] for m in sidecars if isinstance(m.get(pkey), dict) and "sha256" in m[pkey]
                  and m["figure"] not in bad}
        for name, pr in protos.items():
            if pr["name"] in reg and reg[pr["name"]] != pr["sha256"]:
                bad.add(name)
                problem(name, f"{pkey} {pr['name']} sha256 {pr['sha256'][:12]} is not its registered file's "
                              f"{reg[pr['name']][:12]}", next(m for m in sidecars if m["figure"] == name))
        if len({pr["sha256"] for pr in protos.values()}) > 1:
            for name, pr in protos.items():
                if name not in bad:
                    others = ", ".join(sorted(f"{o}.json: {q['name']}@{q['sha256'][:12]}" for o, q in protos.items()
                                              if q["sha256"] != pr["sha256"]))
                    bad.add(name)
                    problem(name, f"{pkey} {pr['name']}@{pr['sha256'][:12]} differs from {others}",
                            next(m for m in sidecars if m["figure"] == name))
    sidecars = [m for m in sidecars if m["figure"] not in bad]
    return sidecars, problems


#: The start of the verdict of a row whose evidence is missing or damaged (figures.report.check accepts it).
NOT_RUN_PREFIX = "not run (evidence missing: "


def not_run_record(rep: dict, label: str) -> dict | None:
    """The verdict-table record ``{verdict, key, note, falsifier}`` of a row whose evidence is missing or damaged
    (``None`` when it is whole): its verdict reads ``not run (evidence missing: <file>, <reason>)``, never a word
    judged from what is left. For ``figures.report.claims`` (verdict rows) and ``answer`` (``answer:<group>``)."""
    t = (rep.get("not_run") or {}).get(label)
    return None if t is None else {"verdict": t, "key": DASH, "note": "evidence missing or damaged: not judged",
                                   "falsifier": None}


def not_run(problems: list[dict]) -> dict[str, str]:
    """``{row: "not run (evidence missing: <file>, <reason>; …)"}`` for every verdict row / answer group a problem
    touches (``C4`` also marks ``C4-rate``, its other row)."""
    out: dict[str, list[str]] = {}
    for pb in problems:
        for r in pb["rows"]:
            for lab in ((r, "C4-rate") if r == "C4" else (r,)):
                out.setdefault(lab, []).append(f"{pb['file']}, {pb['reason']}")
    return {r: NOT_RUN_PREFIX + "; ".join(dict.fromkeys(v)) + ")" for r, v in out.items()}
