"""``protocol``: run the pre-registered training-claims protocol (C5, C9) and print its verdicts.

``--instance-file my_mdp.npz`` (or ``.json``) runs it on your own deterministic tabular MDP instead of the
registered instances (in-process, not cached). The file holds the arrays of
:class:`simulate.protocol.instances.TrainingInstance`:

- ``next_state``: integers ``(T, S, V)``, ``s_{t+1} = next_state[t, s_t, a_t]``;
- ``reward``: ``(S,)`` terminal reward ``R_T(s_T)``; returns must lie in ``[0, 1]``;
- ``s0``: the initial state (an integer);
- optional ``step_reward`` ``(T, S, V)``, ``features`` ``(T·S·V, p)`` (a log-linear policy), ``bernoulli``
  (true: the learner sees ``R ~ Bernoulli(E R(τ))``), ``name`` and ``description`` (strings).

A malformed file is refused with one message naming the file and the offending key.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from asyncgrpo.validation import parse_list

NAME = "protocol"
HELP = "run the pre-registered C5/C9 training protocol (docs/protocol.md) and print the verdict tables"
#: The keys of an instance file: required, then optional.
REQUIRED = ("next_state", "reward", "s0")
OPTIONAL = ("step_reward", "features", "bernoulli", "name", "description")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from simulate.protocol import INSTANCES
    from simulate.protocol.spec import DEFAULT_PATH

    p.add_argument("--protocol", type=Path, default=DEFAULT_PATH, help="protocol TOML file")
    p.add_argument("--quick", action="store_true", help="the file's [quick] overlay: fewer seeds, a smaller grid "
                   "(same rules; not a verdict)")
    p.add_argument("--instance", default=None,
                   help=f"comma list of registered instances (default: the protocol's; known: {', '.join(INSTANCES)})")
    p.add_argument("--instance-file", type=Path, default=None,
                   help="your own tabular MDP as .npz or .json (keys next_state, reward, s0; optional step_reward, "
                        "features, bernoulli, name, description): run the protocol on it instead")
    p.add_argument("--cells", type=Path, default=Path("results") / "cells", help="sweep cell cache root")
    p.add_argument("--out", type=Path, default=None, help="write the run table and verdicts as CSV here")
    p.add_argument("--no-progress", action="store_true", help="hide progress bars")


def _bad(path: Path, what: str) -> ValueError:
    return ValueError(f"--instance-file {path}: {what}")


def load_instance_file(path: Path):
    """A :class:`~simulate.protocol.instances.TrainingInstance` from ``path`` (``.npz`` or ``.json``, module
    docstring); every defect is a ``ValueError`` naming the file and the key."""
    from simulate.protocol.instances import TrainingInstance

    path = Path(path)
    if not path.is_file():
        raise _bad(path, "no such file")
    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        elif suffix == ".json":
            data = json.loads(path.read_text(encoding="utf-8"), object_pairs_hook=lambda kv: _no_repeats(path, kv))
            if not isinstance(data, dict):
                raise _bad(path, "the JSON must be an object with keys " + ", ".join(REQUIRED))
        else:
            raise _bad(path, f"must end in .npz or .json, got {suffix or 'no suffix'!r}")
    except ValueError as e:
        if str(e).startswith("--instance-file"):
            raise
        raise _bad(path, f"unreadable ({e})") from None
    except (OSError, EOFError) as e:
        raise _bad(path, f"unreadable ({e})") from None
    missing = [k for k in REQUIRED if k not in data]
    unknown = sorted(set(data) - set(REQUIRED) - set(OPTIONAL))
    if missing or unknown:
        raise _bad(path, (f"lacks {missing}" if missing else "") + ("; " if missing and unknown else "")
                   + (f"unknown key(s) {unknown}" if unknown else "") + f"; valid keys: {', '.join(REQUIRED + OPTIONAL)}")

    def arr(k, dtype, ndim):
        try:
            a = np.asarray(data[k])
            if a.dtype == object or a.ndim != ndim:
                raise ValueError
            if dtype is np.int64 and not (np.issubdtype(a.dtype, np.integer)
                                          or (np.issubdtype(a.dtype, np.floating) and np.all(a == np.round(a)))):
                raise ValueError
            return a.astype(dtype)
        except (ValueError, TypeError):
            kind = "integers" if dtype is np.int64 else "numbers"
            raise _bad(path, f"{k} must be an array of {kind} with {ndim} dimension(s)") from None

    s0 = np.asarray(data["s0"])
    if s0.ndim != 0 or not np.issubdtype(s0.dtype, np.integer):
        raise _bad(path, f"s0 must be one integer, got {data['s0']!r}")
    kw = dict(step_reward=arr("step_reward", np.float64, 3) if "step_reward" in data else None,
              features=arr("features", np.float64, 2) if "features" in data else None)
    b = data.get("bernoulli", False)
    b = b.item() if isinstance(b, np.ndarray) and b.ndim == 0 else b
    if not isinstance(b, (bool, np.bool_)):
        raise _bad(path, f"bernoulli must be true or false, got {b!r}")
    name = str(data.get("name", path.stem))
    try:
        return TrainingInstance(name, str(data.get("description", f"user instance from {path.name}")),
                                arr("next_state", np.int64, 3), arr("reward", np.float64, 1), int(s0),
                                bernoulli=bool(b), **kw)
    except ValueError as e:
        raise _bad(path, str(e)) from None


def _no_repeats(path: Path, pairs: list) -> dict:
    """A JSON object's keys, each once: ``json`` would silently keep the last of a repeated key (issue 56 item 12)."""
    seen = set()
    for k, _ in pairs:
        if k in seen:
            raise _bad(path, f"key {k!r} is given twice in one JSON object; give each key once")
        seen.add(k)
    return dict(pairs)


def _protocol(path: Path, quick: bool):
    """The ``--protocol`` file loaded up front: a missing, unreadable or malformed file is one clear error."""
    import tomllib

    from simulate.protocol.spec import DEFAULT_PATH, load_protocol

    try:
        return load_protocol(path, quick=quick)
    except FileNotFoundError:
        raise ValueError(f"--protocol {path}: no such file (the registered protocol is {DEFAULT_PATH})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--protocol {path}: unreadable ({getattr(e, 'strerror', None) or e})") from None
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"--protocol {path}: not valid TOML ({e})") from None


def _out_dir(path: Path) -> Path:
    """``--out``: created (with parents) and writable, checked before any run starts."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-check-"):
            pass
    except OSError as e:
        raise ValueError(f"--out {path}: cannot write CSV files there ({e.strerror or e}); give a writable folder") from None
    return path


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from simulate.protocol import INSTANCES, run_protocol

    insts = None
    if args.instance is not None and args.instance_file is not None:
        raise ValueError("--instance and --instance-file exclude each other: name registered instances or give a file")
    if args.instance is not None:
        # a repeated instance doubles n and can flip a verdict (issue 38): refused by the shared list check
        insts = parse_list(args.instance, "--instance", str, "registered instances")
        unknown = sorted(set(insts) - set(INSTANCES))
        if unknown:
            raise ValueError(f"--instance: unknown {unknown}; known: {', '.join(INSTANCES)}")
    if args.instance_file is not None:
        insts = [load_instance_file(args.instance_file)]
    _protocol(args.protocol, args.quick)  # a missing or malformed file: one clear error before anything runs
    if args.out is not None:
        _out_dir(args.out)
    res = run_protocol(args.protocol, quick=args.quick, instances=insts, root=args.cells,
                       progress=not args.no_progress)
    p = res.protocol
    print(f"protocol {p.label} — tuning seeds {list(p.tune_seeds)}, evaluation seeds {p.eval_seeds[0]}…"
          f"{p.eval_seeds[-1]} ({len(p.eval_seeds)})" + ("  [quick: not a verdict]" if p.quick else ""))
    with pd.option_context("display.width", 100, "display.max_columns", 20):
        print("\nC9 per instance (primary cell ε={eps}, G={G}, d={d}):".format(**p.primary))
        print(res.c9["matrix"].fillna("—").to_string())
        print("\nC9 aggregate: " + "; ".join(f"{k}: {v}" for k, v in res.c9["aggregate"].items())
              + f"  →  C9 {res.c9['verdict']}")
        if "sensitivity" in res.c9:
            print(f"C9 at η/√2 (sensitivity line): {res.c9['sensitivity']['verdict']}")
        if "heldout" in res.c9 and len(res.c9["heldout"]):
            h = res.c9["heldout"]
            print(f"cells whose held-out nAUC fell more than {p.heldout_margin:g} below tuning: "
                  f"{int(h.flagged.sum())}/{len(h)}")
        if res.c5:
            print("\nC5 per instance:")
            for inst, r in res.c5["per_instance"].items():
                extra = f" — {r['reason']}" if r.get("reason") else ""
                print(f"  {inst:22s} χ² {r['chi2_median']:.3g}: {r['verdict']}{extra}")
            print(f"C5 aggregate: {res.c5['verdict']}")
    if args.out is not None:
        res.table.to_csv(args.out / "protocol_runs.csv", index=False)
        res.c9["comparisons"].to_csv(args.out / "c9_comparisons.csv", index=False)
        print(f"\nwrote {args.out / 'protocol_runs.csv'} and {args.out / 'c9_comparisons.csv'}")
    return 0
