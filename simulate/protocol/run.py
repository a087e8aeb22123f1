"""Run the protocol: every cell through the sweep engine (cached, resumable, local or Dask), then the
verdicts. The public entry points are :func:`run_protocol`, :func:`run_c9` and :func:`run_c5`.

Registered instances (:data:`simulate.protocol.instances.INSTANCES`) go through :mod:`sweep`, so a
finished cell is never recomputed and an interrupted run resumes; a user's own instance object
(a :class:`~simulate.protocol.instances.TrainingInstance` or a
:class:`simulate.instances.TabularMDP`) runs in-process with the same code::

    from simulate.protocol import run_c9, from_mdp
    from simulate.instances import token_mdp
    frame, verdicts = run_c9(instance=token_mdp(3, 5, state="prev", reward="sum_mod"), quick=True)
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from simulate.protocol import cells as pc
from simulate.protocol.c5 import c5_verdicts, fixed_eta
from simulate.protocol.c9 import c9_verdicts, saturation
from simulate.protocol.catalog import get_instance, is_registered
from simulate.protocol.instances import INSTANCES, TrainingInstance, from_mdp
from simulate.protocol.spec import DEFAULT_PATH, Protocol, load_protocol

__all__ = ["ProtocolResult", "run_protocol", "run_c9", "run_c5", "sweep_cell", "sweep_fixed_cell", "common_etas", "run_pinned",
           "cell_protocol", "protocol_settings", "path_setting", "cell_id"]


@dataclass
class ProtocolResult:
    """Everything one protocol run produced: the tidy tables and the verdict structures."""

    protocol: Protocol
    table: pd.DataFrame
    """One row per run of the grid (``phase`` tune/eval)."""
    fixed: pd.DataFrame
    """C5 test A runs at a fixed η (``phase = "fixed"``)."""
    c5_table: pd.DataFrame = None
    """C5's tuned cells at a fixed number of steps ``K = c5.steps`` (test B)."""
    c9: dict = field(default_factory=dict)
    c5: dict = field(default_factory=dict)


def _proto(protocol, quick: bool) -> Protocol:
    if isinstance(protocol, Protocol):
        return protocol
    return load_protocol(protocol, quick=quick)


def path_setting(path: Path) -> str:
    """The protocol file as a cell setting: ``"default"`` for the committed file, so that cell keys do
    not depend on where the repository is checked out (the hash identifies the content)."""
    p = Path(path).resolve()
    if p == DEFAULT_PATH.resolve():
        return "default"
    if p.parent == DEFAULT_PATH.resolve().parent:  # another registered file (e.g. protocol-v6.toml)
        return "registered:" + p.name
    return str(p)


def protocol_settings(proto: Protocol, path: Path) -> dict:
    """The settings every protocol cell carries: which file (:func:`path_setting`), quick or not, its hash."""
    return dict(protocol_path=path_setting(path), quick=proto.quick, protocol_sha256=proto.sha256)


def cell_id(cell: dict) -> str:
    """A protocol cell's id in its sweep: ``"k=v,…"`` over its own settings, in order."""
    return ",".join(f"{k}={v}" for k, v in cell.items())


def cell_protocol(protocol_path: str, quick: bool, protocol_sha256: str) -> Protocol:
    """The protocol a cell function runs under, read from ``protocol_path`` (``"default"``: the committed
    file); it must still hash to ``protocol_sha256``, or the cell refuses to run."""
    if protocol_path.startswith("registered:"):
        protocol_path = str(DEFAULT_PATH.with_name(protocol_path.removeprefix("registered:")))
    proto = load_protocol(None if protocol_path == "default" else protocol_path, quick=quick)
    if proto.sha256 != protocol_sha256:
        raise ValueError(f"protocol file {protocol_path} changed during the run (sha256 {proto.sha256[:12]} ≠ "
                         f"{protocol_sha256[:12]})")
    return proto


def sweep_cell(instance: str, estimator: str, d: int, eps: float, G: int, protocol_path: str, quick: bool,
               protocol_sha256: str, K: int | None = None) -> pd.DataFrame:
    """Sweep cell function: :func:`simulate.protocol.cells.run_cell` for a registered instance, under
    :func:`cell_protocol`."""
    return pc.run_cell(instance, estimator, d, eps, G, cell_protocol(protocol_path, quick, protocol_sha256), K=K)


def sweep_fixed_cell(instance: str, estimator: str, d: int, eps: float, G: int, eta: float, protocol_path: str,
                     quick: bool, protocol_sha256: str, K: int | None = None, kind: str = "fixed") -> pd.DataFrame:
    """Sweep cell function for C5 test A and the v2 common-η arm (:func:`simulate.protocol.cells.eval_at`)."""
    proto = cell_protocol(protocol_path, quick, protocol_sha256)
    return pc.eval_at(instance, estimator, d, eps, G, eta, proto, K=K, kind=kind)


def common_etas(table: pd.DataFrame, proto: Protocol) -> dict:
    """The common-η arm's step sizes ``{(G, family): η}``: the η tuned at ``d = 0`` by ``onpolicy``
    (trajectory-level maps) or ``grpo`` (token-level maps, whose ĝ is length-normalised), at the primary
    ε, shared by every estimator of the family at every d — a practitioner who tuned before the delay
    appeared. At ``d = 0`` every map of a family coincides, so the choice of the reference is immaterial.
    Under ``token_eta = "length"`` (v4) both families share onpolicy's η (the token-level maps run at ``T·η``,
    :func:`simulate.protocol.cells.step_eta`): one step size is one step."""
    from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

    eps = float(proto.primary["eps"])
    out = {}
    if proto.token_eta == "length":
        for G in proto.G:
            sel = table[(table.estimator == "onpolicy") & (table.d == 0) & (table.G == G) & np.isclose(table.eps, eps)]
            if sel.empty:
                raise ValueError(f"the common-η arm needs onpolicy's cell at d = 0, G = {G}: run the tuned cells first")
            out[(int(G), "trajectory")] = out[(int(G), "token")] = float(sel.eta_tuned.iloc[0])
        return out
    for fam, refs in (("trajectory", ("onpolicy",)), ("token", ("grpo",) + tuple(sorted(TOKEN_ESTIMATORS)))):
        members = [e for e in proto.estimators if (e in TOKEN_ESTIMATORS) == (fam == "token")]
        ref = next((r for r in refs if r in members), members[0] if members else None)
        if ref is None:
            continue
        for G in proto.G:
            sel = table[(table.estimator == ref) & (table.d == 0) & (table.G == G) & np.isclose(table.eps, eps)]
            if sel.empty:
                raise ValueError(f"the common-η arm needs {ref}'s cell at d = 0, G = {G}: run the tuned cells first")
            out[(int(G), fam)] = float(sel.eta_tuned.iloc[0])
    return out


def _common_cells(proto: Protocol, name: str, etas: dict) -> list[dict]:
    from asyncgrpo.estimators.token_level import TOKEN_ESTIMATORS

    up = 2.0 ** proto.neighbour_step_log2
    out = []
    for c in proto.cells(name):
        eta = etas[(c["G"], "token" if c["estimator"] in TOKEN_ESTIMATORS else "trajectory")]
        out += [dict(c, eta=eta, kind="common"), dict(c, eta=eta * up, kind="common-neighbour")]
        if math.isfinite(proto.sensitivity_step_log2):  # v4: the sensitivity line's η/√2
            out.append(dict(c, eta=eta * 2.0 ** proto.sensitivity_step_log2, kind="common-lower"))
    return out


def _fixed_cells(proto: Protocol, name: str, eta: float) -> list[dict]:
    c = proto.c5
    return [dict(instance=name, estimator=e, d=int(d), eps=float(c["eps"]), G=int(G), eta=float(eta), K=int(c["steps"]))
            for e in c["estimators"] for G in c["G"] for d in (0, int(c["d"]))]


def run_pinned(sw, **kw):
    """:func:`sweep.run_sweep` with one Numba thread per local worker process (a cell's kernel batches are
    too small to gain from threads; results do not depend on it). The setting is made only when a pool
    will start: the engine computes a lone missing cell in this process, whose Numba keeps the thread
    count it was imported with (changing ``NUMBA_NUM_THREADS`` here would make its next compile raise)."""
    from sweep import DEFAULT_ROOT, load_cells, run_sweep

    n_workers = int(kw.get("n_workers") or os.cpu_count() or 1)
    pooled = kw.get("backend") == "local" and n_workers > 1
    if pooled:
        stored = load_cells(sw, kw.get("root", DEFAULT_ROOT), code_packages=kw.get("code_packages"))
        pooled = len(sw.cells) - len(stored) > 1
    if not pooled:
        return run_sweep(sw, **kw)
    old = os.environ.get("NUMBA_NUM_THREADS")
    os.environ["NUMBA_NUM_THREADS"] = "1"  # inherited by the spawned workers only
    try:
        return run_sweep(sw, **kw)
    finally:
        if old is None:
            os.environ.pop("NUMBA_NUM_THREADS", None)
        else:
            os.environ["NUMBA_NUM_THREADS"] = old


def _run_cells(fn, cells: list[dict], proto: Protocol, path: Path, sweep_id: str, sweep_kw: dict) -> pd.DataFrame:
    from sweep import Cell, Sweep

    fixed = protocol_settings(proto, path)
    sw = Sweep(sweep_id, fn, tuple(Cell(cell_id(c), {**c, **fixed}) for c in cells))
    kw = dict(backend="serial")
    kw.update(sweep_kw)
    return run_pinned(sw, **kw).table


def _inline(fn, cells: list[dict], proto: Protocol, progress: bool, desc: str) -> pd.DataFrame:
    from asyncgrpo.progress import progress as tqdm

    return pd.concat([fn(**c, proto=proto) for c in tqdm(cells, desc=desc, disable=not progress, leave=False)],
                     ignore_index=True)


def run_protocol(protocol: str | Path | Protocol | None = None, *, quick: bool = False, instances=None,
                 progress: bool = True, local_exponent=None, path: str | Path | None = None,
                 **sweep_kw) -> ProtocolResult:
    """Run the whole protocol (C9 grid, then C5 test A) on ``instances`` (default: the protocol's)
    and return tables and verdicts. ``sweep_kw`` go to :func:`sweep.run_sweep` (``root``, ``backend``,
    ``dask_local``, ``scheduler``…) for registered instances; instance objects run in-process. ``path``: the file
    a :class:`Protocol` object was read from (default: the committed default file), which every cell re-reads and
    checks by hash (e.g. ``simulate score`` runs v6 with one estimator added to its grid)."""
    if path is not None:
        path = Path(path)
    else:
        path = DEFAULT_PATH if protocol is None or isinstance(protocol, Protocol) else Path(protocol)
    proto = _proto(protocol, quick)
    insts = list(proto.instances if instances is None else instances)
    if not insts:
        raise ValueError("instances must name at least one instance")
    names = [i if isinstance(i, str) else getattr(i, "name", None) for i in insts]
    dup = sorted({n for n in names if n is not None and names.count(n) > 1})
    if dup:  # a repeated instance would double n and narrow every interval
        raise ValueError(f"instances must not repeat; repeated: {dup}")
    unknown = [i for i in insts if isinstance(i, str) and not is_registered(i)]
    if unknown:  # refused before any cell runs
        raise ValueError(f"instances: unknown {unknown}; known: {', '.join(INSTANCES)}")
    # a user object under a registered name would take that instance's [instance_settings] (n_prompts, budget) and
    # its report row: only the registered object itself may carry the name
    taken = [n for i, n in zip(insts, names) if not isinstance(i, str) and n in INSTANCES and i is not get_instance(n)]
    if taken:
        raise ValueError(f"instances: an instance object may not reuse a registered name {taken}; rename it (for "
                         f"--instance-file, the file's stem or its 'name' entry)")
    tag = f"protocol-{proto.name}-{proto.sha256[:12]}" + ("-quick" if proto.quick else "")
    tables, c5_tables, fixed = [], [], []
    want_c5 = bool(proto.c5) and set(proto.c5["estimators"]) <= set(proto.estimators)
    for inst in insts:
        registered = isinstance(inst, str)
        if registered:
            get_instance(inst)  # unknown names fail here, before any work
        obj = inst if registered else from_mdp(inst) if not isinstance(inst, TrainingInstance) else inst
        name = obj if registered else obj.name

        def cells_of(fn_ref, fn_inline, cells, suffix, desc):
            if registered:
                return _run_cells(fn_ref, cells, proto, path, f"{tag}-{name}{suffix}", dict(progress=progress, **sweep_kw))
            return _inline(fn_inline, cells, proto, progress, desc)

        t = cells_of("simulate.protocol.run:sweep_cell",
                     lambda **c: pc.run_cell(obj, c["estimator"], c["d"], c["eps"], c["G"], c["proto"]),
                     proto.cells(name), "", f"C9 {name}")
        if "common" in proto.step_arms:
            tc = cells_of("simulate.protocol.run:sweep_fixed_cell",
                          lambda **c: pc.eval_at(obj, c["estimator"], c["d"], c["eps"], c["G"], c["eta"], c["proto"],
                                                 kind=c["kind"]),
                          _common_cells(proto, name, common_etas(t, proto)), "-common", f"common η {name}")
            t = pd.concat([t, tc], ignore_index=True)
        tables.append(t.assign(instance=name))
        if want_c5:
            t5 = cells_of("simulate.protocol.run:sweep_cell",
                          lambda **c: pc.run_cell(obj, c["estimator"], c["d"], c["eps"], c["G"], c["proto"], K=c["K"]),
                          proto.c5_cells(name), "-c5", f"C5 {name}").assign(instance=name)
            c5_tables.append(t5)
            f = cells_of("simulate.protocol.run:sweep_fixed_cell",
                         lambda **c: pc.eval_at(obj, c["estimator"], c["d"], c["eps"], c["G"], c["eta"], c["proto"],
                                                K=c["K"]),
                         _fixed_cells(proto, name, fixed_eta(t5, proto)), "-c5a", f"C5A {name}")
            fixed.append(f.assign(instance=name))
    table = pd.concat(tables, ignore_index=True)
    res = ProtocolResult(proto, table, pd.concat(fixed, ignore_index=True) if fixed else pd.DataFrame(),
                         pd.concat(c5_tables, ignore_index=True) if c5_tables else pd.DataFrame())
    res.c9 = c9_verdicts(table, proto)
    if c5_tables:
        # v4: C5-T's premise is C9's regime of the same instance (one χ² premise, computed once)
        regimes = saturated = None
        if proto.version >= 4:
            regimes = {r.instance: r for r in res.c9["subclaims"].drop_duplicates("instance").itertuples(index=False)}
            # and C9's saturation guard, so an instance out of scope for C9 is out of scope for C5-T too
            saturated = {name: saturation(t, proto)["reason"] for name, t in table.groupby("instance", sort=False)}
        res.c5 = c5_verdicts(res.c5_table, res.fixed, proto, local_exponent, regimes=regimes, saturated=saturated)
    return res


def run_c9(instance=None, protocol=None, *, quick: bool = False, **kw) -> tuple[pd.DataFrame, pd.DataFrame]:
    """C9 on one instance (a registry name, a TrainingInstance or a TabularMDP) or, with
    ``instance=None``, on the protocol's instances: ``(tidy run table, verdict table)``."""
    res = run_protocol(protocol, quick=quick, instances=None if instance is None else [instance], **kw)
    return res.table, res.c9["comparisons"]


def run_c5(instance=None, protocol=None, *, quick: bool = False, **kw) -> tuple[pd.DataFrame, dict]:
    """C5 on one instance or the protocol's instances: ``(tidy fixed-η table, verdicts)``."""
    res = run_protocol(protocol, quick=quick, instances=None if instance is None else [instance], **kw)
    return res.fixed, res.c5


INSTANCE_NAMES = tuple(INSTANCES)
