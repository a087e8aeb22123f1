"""The practitioner's question in one call: for a delay d, protocol v6's recommendation with every rival and the ε/G/η
advice, read from the committed report's sidecars (nothing recomputed). The ε/G notebook's "my delay" cell prints it."""
from __future__ import annotations

import json
from pathlib import Path

import figures

#: The committed report's sidecars.
OUT = Path(figures.__file__).parent / "out"


def for_delay(d: int, out: Path = OUT) -> list[str]:
    """Lines: v6's headline per family and gmc − each rival at the measured delay nearest to ``d`` (primary arm),
    then the ε/G/η advice at the nearest advised delay; a missing sidecar is said, never guessed."""
    from simulate.protocol import headline

    if isinstance(d, bool) or not isinstance(d, int) or d < 0:
        raise ValueError(f"d must be an integer >= 0 (optimizer steps of delay), got {d!r}")
    v6p, advp = Path(out) / "fig_protocol_v6.json", Path(out) / "fig_eps_G_advice.json"
    if not v6p.exists():
        return [f"protocol v6's sidecar is not in {out}: run `make run` (or python -m figures --only fig_protocol_v6)"]
    v6 = json.loads(v6p.read_text())
    meta = v6["v6"]
    dd = min(meta["delays"], key=lambda x: (abs(x - d), x))
    arm = {"tuned": "tuned η", "common": "common η"}[meta["primary_arm"]]
    lines = [f"your delay d = {d} → the nearest measured d = {dd} ({meta['label']}, {arm})"]
    for group in ("tabular-family", "lm-like-family"):
        es = [e for e in v6["answer"] if e["group"] == group and e.get("arm", arm) == arm]
        lines.append("  " + headline.line(group.replace("-family", " family"), headline.decide(es, meta["rivals"],
                                                                                            meta["delays"])))
        for e in sorted((e for e in es if e["d"] == dd), key=lambda e: e["delta"]):
            lines.append(f"    gmc − {e['rival']:<13} {e['delta']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]  "
                         f"P(gmc > rival) {e['poi']:.2f} [{e['poi_lo']:.2f}, {e['poi_hi']:.2f}]")
    if advp.exists():
        adv = json.loads(advp.read_text())["advice"]
        da = min({r["d"] for r in adv}, key=lambda x: (abs(x - d), x))
        lines.append(f"ε, G, η at d = {da} (exploratory; LM-like draws; held-out nAUC IQM [95 % bootstrap]):")
        for r in adv:
            if r["d"] == da:
                eps = "" if r["estimator"] == "grpo" else f"ε = {r['eps']:g}, "
                lines.append(f"  {r['mode']:<6} {r['estimator']:<5} {eps}G = {r['G']}, K = {r['K']}, "
                             f"η ≈ {r['eta_median']:.3g}: {r['iqm']:.3f} [{r['lo']:.3f}, {r['hi']:.3f}]")
    else:
        lines.append(f"the ε/G/η advice sidecar is not in {out}: run `python -m figures --only fig_eps_G_advice`")
    return lines
