"""The files of one LM run and their faults: the output-folder lock, the metrics lines, the checkpoint
and the resume checks (docs/faults.md).

A run holds an exclusive ``flock`` on ``out_dir/.lock``; metrics go to ``metrics.jsonl`` one
``fsync``-ed line per step (a kill tears at most the last line, which resume drops with a warning);
``checkpoint.pt`` loads with ``torch.load(weights_only=True)``; resuming refuses a missing checkpoint
and a changed configuration unless its keys are named in ``force``; a new run refuses a folder that
holds one unless ``overwrite``.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pickle
import warnings

import torch

from simulate.llm.config import TrainConfig, config_diff


@contextlib.contextmanager
def output_lock(out_dir: str):
    """Exclusive ``flock`` on ``out_dir/.lock`` for the duration; ``ValueError`` if another run holds it.

    ``flock`` belongs to the open file, so the kernel releases it when the holder exits or is killed:
    a crashed run never leaves a lock that blocks the next one.
    """
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, ".lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "?"
            raise ValueError(f"out_dir {out_dir!r} is in use by another run (pid {holder} holds {path}); "
                             f"use another --out-dir or wait for it to finish") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the flock


def append_line(path: str, row: dict) -> None:
    """Append one JSON line with a single ``write`` and ``fsync`` it: a kill tears at most this line."""
    data = (json.dumps(row) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def write_lines(path: str, rows: list[dict]) -> None:
    """Replace ``path`` by ``rows`` as JSON lines, atomically (temp file, ``fsync``, rename)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_metrics(path: str) -> list[dict]:
    """Rows of a ``metrics.jsonl``; a torn last line (killed mid-write) is dropped with a warning.

    A damaged line anywhere else is not a torn write but a damaged file: ``ValueError`` naming the line.
    """
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        last = all(not x.strip() for x in lines[i + 1:])
        try:
            row = json.loads(line)
            if not isinstance(row, dict) or "step" not in row:
                raise ValueError("not a metrics row")
        except ValueError:
            if last:
                warnings.warn(f"{path}: dropped a torn last line ({len(line)} bytes, a write cut short); "
                              f"that step is recomputed", stacklevel=2)
                break
            raise ValueError(f"{path} line {i + 1} is damaged (not a JSON metrics row) and is not the last "
                             f"line; refusing to resume over it") from None
        rows.append(row)
    return rows


def load_checkpoint(path: str, device: str) -> dict:
    """``torch.load(weights_only=True)``: tensors, numbers, strings and containers only (no code runs).

    The checkpoint holds only those (state dicts, AdamW state, snapshots, ints, the config dict), so no
    extra safe globals are needed. A file that holds anything else, or is damaged, is a ``ValueError``:
    a checkpoint cannot be recomputed, so resuming stops rather than guess.
    """
    try:
        ck = torch.load(path, map_location=device, weights_only=True)
    except pickle.UnpicklingError as exc:
        raise ValueError(f"checkpoint {path} holds objects outside the weights-only safe set; refusing to load it "
                         f"({str(exc).splitlines()[0]})") from None
    except (RuntimeError, EOFError, OSError) as exc:
        raise ValueError(f"checkpoint {path} is damaged and cannot be read ({type(exc).__name__}: {exc})") from None
    if not isinstance(ck, dict) or not {"model", "optimizer", "snapshots", "version", "step"} <= set(ck):
        raise ValueError(f"checkpoint {path} is not a checkpoint of this harness (missing keys)")
    return ck


#: Config keys that say where a run lives, not what it computes: a moved or copied run folder resumes.
LOCATION_KEYS = ("out_dir",)
#: Files that mean ``out_dir`` holds a run (finished or not).
RUN_FILES = ("metrics.jsonl", "checkpoint.pt", "summary.json")


def check_fresh(cfg: TrainConfig, overwrite: bool = False) -> None:
    """Refuse to start a new run over a folder that holds one (its metrics, checkpoint and summary would be
    replaced) unless ``overwrite``; ``resume`` is the way to continue one."""
    found = [f for f in RUN_FILES if os.path.exists(os.path.join(cfg.out_dir, f))]
    if found and not overwrite:
        raise ValueError(f"out_dir {cfg.out_dir!r} already holds a run ({', '.join(found)}); pass --resume to "
                         f"continue it, --overwrite to replace it, or choose another --out-dir")


def check_resume(cfg: TrainConfig, force=()) -> dict:
    """The checkpoint to resume from, after the checks: it exists, and its config equals ``cfg`` apart
    from :data:`LOCATION_KEYS` (a moved or copied folder resumes).

    Raises ``ValueError`` when there is no checkpoint (resuming must never restart silently and empty
    the metrics) or when the configs differ in a key not named in ``force`` (an iterable of key names,
    e.g. ``("steps",)``; the message lists each differing key). Waived differences are printed as a warning.
    """
    if isinstance(force, bool):
        raise ValueError("force must name the configuration keys whose difference is accepted (e.g. "
                         "force=('steps',), CLI --force steps), not True/False")
    force = {force} if isinstance(force, str) else set(force)
    ckpt_path = os.path.join(cfg.out_dir, "checkpoint.pt")
    if not os.path.exists(ckpt_path):
        raise ValueError(f"resume: no checkpoint at {ckpt_path}; nothing to resume. Run without --resume to "
                         f"start over (that replaces {cfg.out_dir}/metrics.jsonl)")
    ck = load_checkpoint(ckpt_path, cfg.device)
    saved, now = dict(ck.get("config", {})), cfg.to_dict()
    for k in LOCATION_KEYS:
        saved.pop(k, None)
        now.pop(k, None)
    diff = config_diff(saved, now)
    refused = [d for d in diff if d[0] not in force]
    if refused:
        lines = "; ".join(f"{k}: saved {a!r} -> now {b!r}" for k, a, b in refused)
        raise ValueError(f"resume: the configuration differs from the checkpoint's in {len(refused)} key(s): "
                         f"{lines}. Resume with the saved configuration, or name the keys to accept with "
                         f"--force {','.join(k for k, _, _ in refused)}")
    if diff:
        lines = "; ".join(f"{k}: saved {a!r} -> now {b!r}" for k, a, b in diff)
        warnings.warn(f"resume --force: continuing with a changed configuration ({lines})", stacklevel=2)
    return ck


def write_config(cfg: TrainConfig, ck: dict | None, start: int, end: int) -> None:
    """``config.json``: the config the steps are trained with. A resume appends to ``resume_history`` which
    steps it trains and every key whose value differs from the checkpoint's config (``--force``), so the
    file never claims a value for steps that did not use it; a resume with nothing left to train leaves
    the file as it is (with a warning)."""
    path = os.path.join(cfg.out_dir, "config.json")
    out = cfg.to_dict()
    if ck is not None:
        if end <= start:
            warnings.warn(f"resume: the run in {cfg.out_dir} already has {start} of {cfg.steps} steps; nothing to "
                          f"train, config.json left as it is", stacklevel=4)
            return
        saved = {k: v for k, v in dict(ck.get("config", {})).items() if k not in LOCATION_KEYS}
        now = {k: v for k, v in out.items() if k not in LOCATION_KEYS}
        history = []
        if os.path.exists(path):
            try:
                with open(path) as f:
                    history = list(json.load(f).get("resume_history", []))
            except (ValueError, OSError, AttributeError):
                history = []
        history.append({"first_step": start, "last_step": end - 1,
                        "changed": {k: {"before": a, "after": b} for k, a, b in config_diff(saved, now)}})
        out["resume_history"] = history
    with open(path, "w") as f:
        json.dump(out, f, indent=2)


def write_run(cfg: TrainConfig, rows: list[dict], summary: dict) -> None:
    """A finished run's files in ``cfg.out_dir``: ``config.json``, ``metrics.jsonl``, ``metrics.csv`` and
    ``summary.json`` (what :func:`simulate.llm.tree.train_forest` and the batched forest write for each run)."""
    import pandas as pd

    os.makedirs(cfg.out_dir, exist_ok=True)
    with open(os.path.join(cfg.out_dir, "config.json"), "w") as f:
        json.dump(cfg.to_dict(), f, indent=2)
    with open(os.path.join(cfg.out_dir, "metrics.jsonl"), "w") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
    pd.DataFrame(rows).to_csv(os.path.join(cfg.out_dir, "metrics.csv"), index=False)
    with open(os.path.join(cfg.out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
