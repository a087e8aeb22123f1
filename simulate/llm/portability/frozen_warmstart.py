"""Frozen warm starts: one file of weights that every run of a protocol loads instead of training its own.

The supervised warm start is chaotic: two runs of it whose kernels differ in the last bit (float64, ATen
``avx2`` vs ``default``) differ by 2e-13 after 1 step, 5e-11 after 50, 3e-3 after 200 and O(1) after 400,
with held-out accuracies 0.46 and 0.33 (LOG.md, 2026-12-05). A warm start computed per machine or per kernel
path is therefore another starting policy, and LM protocols v4–v6 measured "kernel fragility" mostly as
this: v6's perturbed paths started from warm starts at 0.365 and 0.48 against the pinned 0.51. Post-training
starts from a given checkpoint; here that checkpoint is a committed file (``simulate/llm/warmstarts/``),
identified by the SHA-256 of its bytes, which :func:`load_frozen` checks before using it.

``python -m simulate.llm freeze-warmstart --protocol-version 6 --out FILE`` writes one
(:func:`simulate.llm.warmstart.freeze`, through :func:`write_frozen`): the warm start the protocol's settings give
on this machine, with its provenance (CPU, kernel path, torch, commit, settings, held-out accuracy) inside the
file. This module is the file format only (it imports no other module of the harness).
"""
from __future__ import annotations

import hashlib
import json
import os

import torch

__all__ = ["DIR", "resolve", "file_sha256", "state_checksum", "load_frozen", "write_frozen"]

#: Where committed frozen warm starts live; a bare file name in ``WarmStartConfig.frozen`` is looked up here.
DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "warmstarts")  # simulate/llm/warmstarts


def resolve(name: str) -> str:
    """The path of a frozen warm start: ``name`` itself if it has a directory part, else ``DIR/name``."""
    return name if os.path.dirname(name) else os.path.join(DIR, name)


def file_sha256(path: str) -> str:
    """SHA-256 (hex) of the file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def state_checksum(state_dict: dict) -> str:
    """SHA-256 over the names, dtypes, shapes and bytes of every tensor, in name order."""
    h = hashlib.sha256()
    for name in sorted(state_dict):
        t = state_dict[name].detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def load_frozen(cfg, model) -> dict:
    """Load ``cfg.warmstart.frozen`` into ``model`` (cast to its dtype) and return the file's provenance with
    ``path``, ``file_sha256``, ``frozen = True`` and ``made_heldout_accuracy`` (the accuracy where it was made).

    Refuses (``ValueError`` naming the file) a missing file, one whose SHA-256 is not
    ``cfg.warmstart.frozen_sha256``, a malformed one (unreadable by ``torch.load``, keys or types not those
    :func:`write_frozen` writes, info not a JSON object), one whose weights fail their own checksum, hold NaN or inf,
    or do not fit the model."""
    ws = cfg.warmstart
    path = resolve(ws.frozen)
    if not os.path.isfile(path):
        raise ValueError(f"warmstart.frozen {ws.frozen!r}: no such file ({path}); frozen warm starts are committed "
                         f"under {DIR} or given as a path")
    got = file_sha256(path)
    if got != ws.frozen_sha256:
        raise ValueError(f"warmstart.frozen {path}: SHA-256 {got} is not the registered {ws.frozen_sha256}; the file "
                         f"was changed or damaged, refusing it (restore it with git, or register the new file)")
    blob = _read(path, cfg.device)
    state = blob["state_dict"]
    if state_checksum(state) != blob["sha256"]:
        raise ValueError(f"warmstart.frozen {path}: its weights fail their own checksum")
    bad = [k for k, t in state.items() if (t.is_floating_point() or t.is_complex()) and not bool(torch.isfinite(t).all())]
    if bad:  # NaN/inf weights would surface later as a sampling error (torch.multinomial: invalid probabilities)
        raise _malformed(path, f"non-finite weights (NaN or inf) in {len(bad)} tensor(s), first {bad[0]!r}")
    try:
        model.load_state_dict(state)
    except RuntimeError as exc:
        raise ValueError(f"warmstart.frozen {path} does not fit the model of preset {cfg.preset!r}: {exc}") from None
    cast = [k for k, t in model.state_dict().items() if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if cast:  # finite in the file, inf once cast to the model's dtype (1e300 into float32)
        raise _malformed(path, f"weights overflow the model's dtype (inf after the cast) in {cast[0]!r}")
    info = dict(json.loads(blob["info"]))
    info.update(path=path, file_sha256=got, frozen=True, made_heldout_accuracy=info.get("heldout_accuracy"))
    return info


def _malformed(path: str, what: str) -> ValueError:
    return ValueError(f"warmstart.frozen {path}: {what}; not a frozen warm start as write_frozen writes it (a dict of "
                      "state_dict: name → tensor, info: JSON object text, sha256: hex of the weights' checksum); "
                      "restore the file with git or write one with `python -m simulate.llm freeze-warmstart`")


def _read(path: str, device) -> dict:
    """The file's ``{"state_dict", "info", "sha256"}``, each of its type, else ``ValueError`` naming the file and what
    is wrong (issue 56 item 11: a file whose SHA-256 matches can still be malformed: registered by mistake, or
    written by something else)."""
    import pickle

    try:
        blob = torch.load(path, map_location=device, weights_only=True)
    except (RuntimeError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, KeyError,
            ImportError, OSError) as exc:  # a truncated or foreign file: torch's zip reader or unpickler
        raise _malformed(path, "unreadable by torch.load ({})".format(" ".join(f"{type(exc).__name__}: {exc}".split())[:300])) from None
    if not isinstance(blob, dict):
        raise _malformed(path, f"it holds a {type(blob).__name__}, not a dict")
    missing = [k for k in ("state_dict", "info", "sha256") if k not in blob]
    if missing:
        raise _malformed(path, f"it lacks {missing} (has {sorted(map(str, blob))})")
    state = blob["state_dict"]
    if not isinstance(state, dict) or not state:
        raise _malformed(path, f"state_dict is {type(state).__name__ if not isinstance(state, dict) else 'empty'}")
    wrong = [k for k, t in state.items() if not (isinstance(k, str) and isinstance(t, torch.Tensor))]
    if wrong:
        raise _malformed(path, f"state_dict entry {wrong[0]!r} is not a name → tensor pair")
    if not isinstance(blob["sha256"], str):
        raise _malformed(path, f"sha256 is {type(blob['sha256']).__name__}, not text")
    try:
        info = json.loads(blob["info"])
    except (TypeError, ValueError) as exc:
        raise _malformed(path, f"info is not JSON text ({type(exc).__name__})") from None
    if not isinstance(info, dict):
        raise _malformed(path, f"info is JSON {type(info).__name__}, not an object")
    return blob


def write_frozen(state: dict, provenance: dict, out: str) -> str:
    """Write ``state`` (tensors) with ``provenance`` and the weights' checksum to ``out`` (atomically; never over
    an existing file, ``ValueError``); returns the file's SHA-256."""
    if os.path.exists(out):
        raise ValueError(f"--out {out!r} exists; a frozen warm start is never overwritten (choose another name)")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    tmp = out + ".tmp"
    torch.save({"state_dict": state, "info": json.dumps(provenance, sort_keys=True), "sha256": state_checksum(state)}, tmp)
    os.replace(tmp, out)
    return file_sha256(out)
