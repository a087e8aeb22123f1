"""The LM runs in the report's words: failure counts per estimator at a delay, and step-size arms broken for every
estimator (the d = 0 control included), which are out of scope rather than a verdict."""
from __future__ import annotations


def lm_failures(rep: dict, d: int) -> str:
    """``onpolicy 12/12, gmc 0/12`` failed runs at delay ``d`` and the base step size, from the LM runs."""
    runs = [r for r in (rep.get("lm_meta") or {}).get("runs") or [] if float(r.get("lr_factor", 1.0)) == 1.0
            and int(r["d"]) == d]
    ests = list(dict.fromkeys(r["estimator"] for r in runs))
    return ", ".join(f"{e} {sum(r['failure'] != 'none' for r in runs if r['estimator'] == e)}/"
                     f"{sum(r['estimator'] == e for r in runs)}" for e in ests)


def broken_arms(meta: dict | None) -> dict[float, str]:
    """LM step-size arms where every run fails, the d = 0 control included: ``{lr_factor: why}`` (out of scope)."""
    out = {}
    runs = (meta or {}).get("runs") or []
    for fac in dict.fromkeys(float(r.get("lr_factor", 1.0)) for r in runs):
        rs = [r for r in runs if float(r.get("lr_factor", 1.0)) == fac]
        ctrl = [r for r in rs if int(r["d"]) == 0]
        if rs and ctrl and all(r.get("failure", "none") != "none" for r in rs):
            out[fac] = (f"every run fails ({len(rs)}/{len(rs)}), the d = 0 control included "
                        f"({len(ctrl)}/{len(ctrl)})")
    return out


__all__ = ["lm_failures", "broken_arms"]
