"""The last ``make verify``'s stamp (written by :mod:`figures.verify`): read, checked, and said in one sentence for the
report's head. Kept apart from the command so the report reads it without importing what the command runs."""
from __future__ import annotations

import json
from pathlib import Path

STAMP = Path(__file__).resolve().parents[2] / "figures" / "history" / "verify.json"


def stamp_line(st: dict | None) -> str:
    """One sentence for the report's head: when ``make verify`` last ran and what it found."""
    if not st:
        return "Kernel-path check (`make verify`): never run on this tree."
    lm, nb = st.get("lm") or {}, st.get("numba") or {}
    ident = "; ".join(f"{p}: {i['equal']}/{i['runs']} runs equal" for p, i in (lm.get("identity") or {}).items())
    return (f"Kernel-path check (`make verify`, {st['date']}, git `{st['commit'][:12]}`): "
            f"{'passed' if st['ok'] else '**FAILED**'} — LM {lm.get('protocol', '?')}: {lm.get('parts', 0)} parts, "
            f"{len(lm.get('fragile') or [])} fragile ({ident or 'no path ran'}); Numba generic vs host: "
            f"{nb.get('equal', 0)}/{nb.get('runs', 0)} runs equal, largest |Δ nAUC| {nb.get('max_abs_nauc', 0.0):.2g}, "
            f"{len(nb.get('failure_flips') or [])} failure flags differ.")


def load_stamp(path: Path = STAMP) -> dict | None:
    """The last stamp, or ``None`` when absent; an unreadable one is refused (never quoted)."""
    if not Path(path).exists():
        return None
    try:
        st = json.loads(Path(path).read_text())
    except ValueError as err:
        raise ValueError(f"{path}: unreadable verify stamp ({err})") from err
    for k in ("date", "commit", "ok", "lm", "numba"):
        if k not in st:
            raise ValueError(f"{path}: verify stamp lacks {k!r}")
    return st
