"""Running configurations: :func:`run_training`, :func:`run_many` (batches in the parallel kernel)."""
from __future__ import annotations

import numpy as np

from simulate.training.config import OPTIMIZERS, TrainConfig, TrainResult, optimal_J
from simulate.training.kernel import RUN_DTYPE, ZERO_TOL_OFF, _train_batch_nb

def run_training(config: TrainConfig, mdp=None) -> TrainResult:
    """Run one configuration; ``mdp`` (built from ``config.instance`` if ``None``) may be passed to skip rebuilding."""
    return run_many([config], mdp=mdp)[0]


def run_many(configs, mdp=None, progress: bool = False, chunk: int | None = None, desc: str = "runs",
             share_rows: bool = True):
    """Run many configurations; returns a list of :class:`TrainResult` in the same order.

    Configs are grouped by ``(instance, steps)``; each group runs in the parallel kernel, in chunks
    of ``chunk`` runs (default ``8 × threads``) so that ``progress`` can show a tqdm bar. ``mdp``
    overrides the instance of every config (for tests with hand-built instances). ``share_rows=False``
    computes the logits, ``log π`` and ``χ²`` terms of every row instead of once per distinct reachable row
    (:func:`simulate.training.problem.row_maps_nb`): the same numbers, slower; the reference of the sharing.
    """
    import numba

    if not isinstance(share_rows, (bool, np.bool_)):
        raise ValueError(f"share_rows must be True or False, got {share_rows!r}")
    configs = list(configs)
    results: list[TrainResult | None] = [None] * len(configs)
    groups: dict = {}
    for j, c in enumerate(configs):
        groups.setdefault((c.instance, c.steps), []).append(j)
    chunk = chunk or 8 * numba.get_num_threads()
    bar = None
    if progress:
        from asyncgrpo.progress import progress as tqdm

        bar = tqdm(total=len(configs), desc=desc, unit="run")
    built: dict = {}
    for (inst, K), idx in groups.items():
        m = mdp if mdp is not None else built.setdefault(inst, inst.build())
        inputs = kernel_inputs(m)  # copied once per instance, not once per chunk
        for start in range(0, len(idx), chunk):
            part = [configs[j] for j in idx[start:start + chunk]]
            for j, res in zip(idx[start:start + chunk], _run_batch(part, m, K, inputs, share_rows)):
                results[j] = res
            if bar is not None:
                bar.update(len(part))
    if bar is not None:
        bar.close()
    return results


def run_records(configs) -> np.ndarray:
    """The runs' scalar settings as a :data:`simulate.training.kernel.RUN_DTYPE` array: each field from the
    ``TrainConfig`` attribute of the same name (``opt``: the optimiser's index in ``OPTIMIZERS``; ``zero_tol``
    ``None`` as ``ZERO_TOL_OFF``)."""
    out = np.empty(len(configs), dtype=RUN_DTYPE)
    for name in RUN_DTYPE.names:
        out[name] = [_record_value(c, name) for c in configs]
    return out


def _record_value(c: TrainConfig, name: str):
    if name == "opt":
        return OPTIMIZERS.index(c.optimizer)
    if name == "zero_tol":
        return ZERO_TOL_OFF if c.zero_tol is None else float(c.zero_tol)
    return getattr(c, name)


def _kernel_array(a, dtype) -> np.ndarray:
    """A writable C-contiguous copy: Numba types an array by dtype, layout *and* read-only flag, so an instance
    whose arrays are read-only (frozen, broadcast or memory-mapped) would compile a second specialisation of
    the whole kernel (~35 s each; the make run of 2026-12-06 compiled four, LOG.md); copies make it one."""
    return np.array(a, dtype=dtype, order="C", copy=True)


def kernel_inputs(mdp) -> tuple:
    """The instance's arrays as :func:`~simulate.training.kernel._train_batch_nb` takes them:
    ``(next_state, reward, step_reward, starts, phi, use_phi, bernoulli)``, each array a writable C-contiguous
    copy (:func:`_kernel_array`), so every instance runs the one compiled specialisation."""
    next_state = _kernel_array(mdp.next_state, np.int64)
    reward = _kernel_array(mdp.reward, np.float64)
    # Optional parts of a protocol instance (simulate.protocol.instances): per-step rewards, a
    # feature policy θ = Φw, and Bernoulli rewards; a plain TabularMDP has none of them.
    step_reward = getattr(mdp, "step_reward", None)
    step_reward = np.zeros(next_state.shape) if step_reward is None else _kernel_array(step_reward, np.float64)
    phi = getattr(mdp, "features", None)
    use_phi = phi is not None
    phi = np.zeros((1, 1)) if phi is None else _kernel_array(phi, np.float64)
    bernoulli = bool(getattr(mdp, "bernoulli", False))
    # several start states (contexts, simulate.training.contexts)
    starts = getattr(mdp, "starts", None)
    starts = np.array([int(mdp.s0)], dtype=np.int64) if starts is None else _kernel_array(starts, np.int64)
    return next_state, reward, step_reward, starts, phi, use_phi, bernoulli


def _run_batch(configs, mdp, K, inputs, share_rows=True) -> list[TrainResult]:
    next_state, reward, step_reward, starts, phi, use_phi, bernoulli = inputs
    shape = tuple(next_state.shape)
    R = len(configs)
    P = phi.shape[1] if use_phi else int(np.prod(shape))
    w_init = getattr(mdp, "w_init", None)  # a warm start (issue 33)

    delays = np.stack([c.delays() for c in configs])
    J_star = optimal_J(mdp)
    w0 = np.stack([c.theta0((P,)) for c in configs])
    if w_init is not None:
        w_init = np.asarray(w_init, dtype=np.float64)
        if w_init.shape != (P,) or not np.all(np.isfinite(w_init)):
            raise ValueError(f"w_init must be a finite array of shape (n_params,) = ({P},), got shape {w_init.shape}")
        w0 = w0 + w_init
    J = np.empty((R, K + 1))
    gn2 = np.empty((R, K + 1))
    chi2, clip, ess, ghat, zero, dpar, lrmax, gpar, gdot, gneg = (np.empty((R, K)) for _ in range(10))
    theta = np.empty((R,) + shape)
    div = np.empty(R, dtype=np.int64)
    with np.errstate(all="ignore"):
        _train_batch_nb(
            next_state, reward, step_reward, starts, phi, use_phi, bernoulli, share_rows, w0, run_records(configs),
            delays, J, gn2, chi2, clip, ess, ghat, zero, theta, dpar, lrmax, gpar, gdot, gneg, div,
        )
    return [
        TrainResult(config=c, J=J[r], grad_norm2=gn2[r], chi2=chi2[r], clip_frac=clip[r], ess=ess[r],
                    ghat_norm2=ghat[r], zero_grad=zero[r], delays=delays[r],
                    diverged_at=None if div[r] < 0 else int(div[r]), theta=theta[r], J_star=J_star,
                    dtheta_norm=dpar[r], logratio_max=lrmax[r], gpar_norm2=gpar[r], gdot=gdot[r], gneg=gneg[r])
        for r, c in enumerate(configs)
    ]


__all__ = ["kernel_inputs", "run_training", "run_many", "run_records"]
