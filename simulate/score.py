"""The staleness benchmark for any weight map (issue 58): ``python -m simulate score --estimator module:NAME``.

Scoring a map means, in order:

1. the property kit (:func:`asyncgrpo.testing.check_weight_map`) on its NumPy backend at the primary ε — is it in
   the class 𝒲_ε, is it bounded, is it the bias minimiser, … (rows named by the kit);
2. training it under protocol v6 (docs/protocol.md "Version 6": the drawn tabular and LM-like instances, d ∈
   {0, 8, 32}, η tuned per estimator on the tuning seeds, the held-out seeds for the numbers) beside the registry's
   strongest corrections — gmc and v6's rival set (onpolicy, is, tis, tic, grpo, the verl and TRL corrections);
3. per family and delay, on v6's primary arm: the map against each of them, the IQM difference of nAUC and the
   probability of improvement with 95 % stratified-bootstrap intervals (:mod:`simulate.protocol.aggregate`), and the
   headline rule (:mod:`simulate.protocol.headline`) applied to the map: "use the map" only if no rival is
   significantly ahead of it at any delay;
4. a one-page markdown scorecard and its performance-profile figure.

Cells go through the sweep engine (cached and resumable: an interrupted score resumes without recomputing a
finished cell). A plugin changes the code version of every cell (its source hash keys them), so the registry's
estimators are re-run beside it; ``--quick`` uses v6's ``[quick]`` overlay.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

__all__ = ["score", "scorecard_entries", "scorecard_markdown", "property_rows"]


def property_rows(name: str, eps: float) -> list[list[str]]:
    """``[property, verdict, detail]`` of the property kit on the registered estimator ``name`` (NumPy backend)."""
    from asyncgrpo import estimators as est
    from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS
    from asyncgrpo.testing import check_weight_map

    if name in TOKEN_ESTIMATORS:
        return [["trajectory weight-map properties", "out of scope", f"{name} is a token-level loss, not a map"]]
    wm = est.get(name, eps=eps)
    rep = check_weight_map(lambda ell, e: wm(ell), eps=eps, max_examples=50, name=name)
    return [[r.property, r.verdict, r.detail or r.description] for r in rep.rows]


def scorecard_entries(table, proto, name: str, rivals) -> dict[str, list[dict]]:
    """``{family: [entry]}``: ``name − rival`` per family × d on ``proto``'s primary arm (IQM difference and
    probability of improvement, stratified bootstrap; the entries the headline rule reads)."""
    from simulate.protocol.aggregate import family_comparisons

    out: dict[str, list[dict]] = {}
    for c in family_comparisons(table, proto, name, rivals):
        out.setdefault(c["family"], []).append({k: c[k] for k in ("rival", "d", "delta", "lo", "hi", "poi", "poi_lo",
                                                                   "poi_hi", "n_instances")})
    return out


def scorecard_markdown(name: str, proto, entries: dict, props: list[list[str]], figure: str | None) -> str:
    """The one-page scorecard (markdown)."""
    from simulate.protocol import headline
    from simulate.protocol import aggregate as ag

    rivals = list(dict.fromkeys(e["rival"] for es in entries.values() for e in es))
    lines = [f"# Staleness scorecard: `{name}`", "",
             f"Protocol `{proto.label}` (docs/protocol.md, version 6): instances drawn by seed, d ∈ "
             f"{{{', '.join(map(str, proto.delays))}}}, η tuned per estimator ({proto.primary_arm} arm), "
             f"{len(proto.eval_seeds)} held-out seeds per instance. Positive: `{name}` better.", "",
             "## Verdict (the report's headline rule)", ""]
    for fam, es in entries.items():
        dec = headline.decide(es, rivals, proto.delays)
        lines.append("- " + headline.line(f"{fam} family ({es[0]['n_instances']} drawn)", dec, subject=name))
    lines += ["", f"## {name} − each rival", "",
              f"IQM difference of nAUC [interval]; P = P({name} > rival), rliable's probability of improvement "
              f"[interval]; intervals: {ag.INTERVAL}.", ""]
    head = ["rival"] + [f"{fam}, d = {d}" for fam in entries for d in proto.delays]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rivals:
        row = [r]
        for fam, es in entries.items():
            for d in proto.delays:
                e = next((x for x in es if x["rival"] == r and x["d"] == int(d)), None)
                row.append("not measured" if e is None else
                           f"{e['delta']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]; P {e['poi']:.2f} "
                           f"[{e['poi_lo']:.2f}, {e['poi_hi']:.2f}]")
        lines.append("| " + " | ".join(row).replace("-", "−") + " |")
    lines += ["", "## Property kit (asyncgrpo.testing.check_weight_map, NumPy backend)", "",
              "| property | verdict | detail |", "|---|---|---|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in props]
    if figure:
        lines += ["", f"![performance profiles]({figure})"]
    return "\n".join(lines) + "\n"


def score(name: str, *, quick: bool = False, out: str | Path = "results/score", protocol: str | Path | None = None,
          progress: bool = True, **sweep_kw) -> Path:
    """Score the registered estimator ``name`` (a plugin must be loaded through ``$ASYNCGRPO_ESTIMATORS`` first) and
    write ``<out>/scorecard-<name>.md`` and its figure; returns the markdown's path (module docstring)."""
    from simulate import score_figure
    from simulate.protocol import run_protocol
    from simulate.protocol.spec import V6_PATH, load_protocol
    from simulate.training.config import REGISTERED_ESTIMATORS

    if name not in REGISTERED_ESTIMATORS:
        raise ValueError(f"estimator must be a registered name ({', '.join(REGISTERED_ESTIMATORS)}); a plugin map is "
                         f"registered by naming its module in $ASYNCGRPO_ESTIMATORS (or --estimator module:NAME), "
                         f"got {name!r}")
    path = Path(protocol) if protocol is not None else V6_PATH
    base = load_protocol(path, quick=quick)
    if base.version < 6:
        raise ValueError(f"protocol must be a version-6 file (instances drawn by seed, a rival set), got version "
                         f"{base.version} ({path})")
    rivals = tuple(dict.fromkeys(("gmc", *base.rivals)))
    rivals = tuple(r for r in rivals if r != name)
    proto = dataclasses.replace(base, estimators=tuple(dict.fromkeys((*base.estimators, name))))
    if "backend" not in sweep_kw and "client" not in sweep_kw and "scheduler" not in sweep_kw:
        sweep_kw["backend"] = "local" if int(sweep_kw.get("n_workers") or os.cpu_count() or 1) > 1 else "serial"
    res = run_protocol(proto, quick=quick, path=path, progress=progress, **sweep_kw)
    entries = scorecard_entries(res.table, proto, name, rivals)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig = out / f"scorecard-{name}.png"
    score_figure.performance_profiles(res.table, proto, name, rivals, fig)
    md = out / f"scorecard-{name}.md"
    md.write_text(scorecard_markdown(name, proto, entries, property_rows(name, float(proto.primary["eps"])), fig.name))
    return md
