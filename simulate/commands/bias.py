"""``bias``: Monte Carlo bias, second moment and 𝔅 of estimators under controlled staleness.

Wraps :func:`simulate.montecarlo.bias_table`: for each ``(G, d)`` one pass samples groups from
``μ = π_{θ−d·η·u}`` and evaluates every ``(estimator, ε)`` on the same groups. Printed: the bias
decomposed into its baseline part ``‖∇J‖/G`` (C8) and its weighting part ``‖E[ĝ_w − ĝ_is]‖`` (C7) next
to the total, then each measurement (± standard error) next to the exact value and theory's bound.
"""
from __future__ import annotations

import argparse
import sys
import warnings

from asyncgrpo import estimators as est
from asyncgrpo.validation import parse_list
from simulate import montecarlo as mc

NAME = "bias"
HELP = "Monte Carlo of E[ĝ] bias (baseline and weighting parts), E‖ĝ‖², 𝔅(w;ρ) and removed mass under staleness"
DEFAULT_QUANTITIES = "grad_bias,baseline_bias,weighting_bias,sq_norm,bias_functional,removed_mass"
#: Above this many sampled tokens the command says how long it will take (about 50 M tokens/s/core).
_LONG_RUN_TOKENS = 10**10


def _list(convert, option: str, what: str, all_of=None):
    """An argparse ``type``: :func:`asyncgrpo.validation.parse_list` (no value twice), refused at parse time;
    ``all_of``: the values ``all`` stands for."""
    def parse(text: str):
        if all_of is not None and text.strip() == "all":
            return list(all_of)
        try:
            return parse_list(text, option, convert, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix(f"{option}: ")) from None  # argparse names it
    return parse


def _chunks(n_groups: int) -> int:
    """Chunks of the sampling pass: the largest divisor of ``n_groups`` in ``[8, 32]`` (so that exactly
    ``n_groups`` run, in parallel), else 32 (``bias_table`` then rounds down, and the caller says so)."""
    if n_groups <= 32:
        return n_groups
    return next((k for k in range(32, 7, -1) if n_groups % k == 0), 32)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--instance", default="token-mdp", choices=sorted(mc.INSTANCES), help="synthetic instance")
    p.add_argument("--estimators", default="gmc,tic,tis", help=f"comma list or 'all' (known: {', '.join(est.ESTIMATORS)})")
    p.add_argument("--eps", type=_list(float, "--eps", "thresholds ε > 0"), default="0.2", help="comma list of ε > 0")
    p.add_argument("--G", type=_list(int, "--G", "group sizes G >= 1"), default="4,16,64", help="comma list of group sizes G >= 1")
    p.add_argument("--delay", type=_list(int, "--delay", "delays d >= 0"), default="0,2,8", help="comma list of delays d >= 0")
    p.add_argument("--n-groups", type=int, default=20_000, help="groups per (G, d)")
    p.add_argument("--eta", type=float, default=None, help="step size η of the staleness pair (None: the instance's, bandit 0.15, token-mdp 0.1)")
    p.add_argument("--direction", default="grad", choices=("grad", "random"), help="direction u of θ − dηu")
    p.add_argument("--seed", type=int, default=0, help="seed")
    p.add_argument("--tail", default="fourth", choices=("fourth", "second"), help="tail inequality of theory's C4 bounds")
    p.add_argument("--quantities", type=_list(str, "--quantities", "quantity names", ["all"]), default=DEFAULT_QUANTITIES,
                   help="comma list of quantities to print, or 'all'; the CSV always has all")
    p.add_argument("--no-exact", action="store_true", help="skip exact expectations (otherwise computed where a method applies)")
    p.add_argument("--out", default=None, help="also write the full tidy table to this CSV file")


def main(args: argparse.Namespace) -> int:
    # checked first thing, before any work (the shared list check: each estimator once)
    names = list(est.ESTIMATORS) if args.estimators.strip() == "all" else parse_list(args.estimators, "--estimators",
                                                                                    str, "estimator names")
    unknown = [nm for nm in names if nm not in est.ESTIMATORS]
    if unknown:
        raise ValueError(f"--estimators: unknown estimator {unknown[0]!r}; known: {', '.join(est.ESTIMATORS)}")
    if args.n_groups < 2:
        raise ValueError(f"--n-groups must be an integer >= 2, got {args.n_groups}")
    if any(g < 1 for g in args.G):
        raise ValueError(f"--G: group sizes must be integers >= 1, got {args.G}")
    mdp = mc.make_instance(args.instance)
    n_chunks = _chunks(args.n_groups)
    if args.n_groups % n_chunks:
        print(f"note: --n-groups {args.n_groups} rounded down to {args.n_groups // n_chunks * n_chunks} "
              f"(a multiple of the {n_chunks} chunks; no divisor in [8, 32])", file=sys.stderr)
    n_slots = len(mc.slots_of(names, args.eps)[2]) + 1  # + the `is` slot the weighting part is measured against
    for G in args.G:  # up front, before any work: the largest pass must fit in memory
        mc.check_memory(mc.plan_memory(mdp.T, mdp.S, mdp.V, n_slots, G, n_chunks, True, mc.choose_route(G, mdp.T, n_slots))[1], "--G")
    tokens = args.n_groups * max(args.G) * mdp.T * len(args.delay)
    if tokens > _LONG_RUN_TOKENS:
        print(f"note: --G {max(args.G)} × --n-groups {args.n_groups} samples about {tokens:.2g} tokens per G; "
              f"expect roughly {tokens / 5e7 / 60:.0f} CPU-minutes", file=sys.stderr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", mc.ExactLimitWarning)
        df = mc.bias_table(args.instance, names, args.eps, args.G, args.delay, n_groups=args.n_groups, seed=args.seed,
                           eta=args.eta, direction=args.direction, tail=args.tail, exact=not args.no_exact,
                           n_chunks=n_chunks, progress=True)
    for w in caught:
        if issubclass(w.category, mc.ExactLimitWarning):
            print(f"warning: {w.message}", file=sys.stderr)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if args.out:
        df.to_csv(args.out, index=False)
    print("bias = baseline part (C8) + weighting part (C7); value ± se [exact]")
    print(mc.format_decomposition(df))
    print()
    qs = args.quantities if isinstance(args.quantities, list) else args.quantities.split(",")
    quantities = None if qs == ["all"] else qs + ["chi2"]
    print(mc.format_table(df, quantities))
    print(f"instance {df.instance.iloc[0]}, n = {df.n.iloc[0]} groups per (G, d); se = σ̂/√n; "
          "—: no bound in theory for that row, or exact value not computed (exact_note in the CSV says why)")
    if args.out:
        print(f"wrote {len(df)} rows to {args.out}")
    return 0
