"""``e^x`` that LLVM can vectorise (issue 59), measured for the training kernel's hot loops and not used there.

It made ``log π``, ``π``, the ``χ²`` terms and the alias rows ≈ 3× cheaper, but moved 6 of 320 protocol-length runs
(count-long-bernoulli, seed 0, Adam) by up to 20 % in ``J`` from step 11 on (:mod:`simulate.training.rows`), so the
kernel keeps libm's ``exp``. Kept, tested, for a decision that accepts such moves.

Numba's ``math.exp`` is a call into the C library, one element at a time (≈ 6.6 ns on an Intel Xeon, 2026-12-07),
and a learner step evaluates a few thousand of them. :func:`exp_nb` is straight-line IEEE arithmetic, so a loop of
it vectorises:

    x = k ln 2 + r,  k = round(x / ln 2),  |r| ≤ ln 2 / 2,   e^x = 2^k · Σ_{n=0}^{13} rⁿ/n!

with ``k ln 2`` split as ``k·LN2_HI + k·LN2_LO`` (``LN2_HI`` has 32 significant bits, so ``k·LN2_HI`` and
``x − k·LN2_HI`` are exact for ``|k| < 2¹¹``), the Taylor sum's truncation below 5·10⁻¹⁸ relative, and ``2^k`` applied
as two exact powers of two (``2^⌊k/2⌋·2^{k−⌊k/2⌋}``), so a subnormal result is rounded once. The result is within
2 ulp of the correctly rounded ``e^x`` (``tests/test_training_vexp.py``), and ``e^0 = 1``, ``e^{−∞} = 0``,
``e^{+∞} = +∞``, NaN in NaN out, exactly as libm. No FMA, no ``fastmath``: every CPU and instruction set computes the
same bits (unlike libm, whose FMA and SSE2 variants differ in the last bit).
"""
from __future__ import annotations

import math

from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

LOG2E = 1.4426950408889634
LN2_HI = 6.93147180369123816490e-01  # 0x3FE62E42FEE00000: 32 significant bits
LN2_LO = 1.90821492927058770002e-10
SHIFT = 6755399441055744.0  # 1.5·2⁵²: x + SHIFT rounds x to an integer held in the low bits
SHIFT_BITS = 0x4338000000000000
C = tuple(1.0 / math.factorial(n) for n in range(14))


@intrinsic
def _bits(typingctx, x):
    """The IEEE bits of a float64, as int64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))
    return types.int64(types.float64), codegen


@intrinsic
def _from_bits(typingctx, i):
    """The float64 whose IEEE bits are the int64 ``i``."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@njit(cache=True, inline="always", _nrt=False)
def exp_nb(x):
    """``e^x`` (module docstring): branch-free, so a loop of it vectorises."""
    y = x if x == x else 0.0  # NaN: computed on 0, returned as NaN below
    y = 710.0 if y > 710.0 else y  # e^710 = +∞ and e^−746 = 0 in float64: |k| stays below 2¹¹
    y = -746.0 if y < -746.0 else y
    kd = y * LOG2E + SHIFT
    kf = kd - SHIFT
    r = (y - kf * LN2_HI) - kf * LN2_LO
    p = C[13]
    p = C[12] + r * p
    p = C[11] + r * p
    p = C[10] + r * p
    p = C[9] + r * p
    p = C[8] + r * p
    p = C[7] + r * p
    p = C[6] + r * p
    p = C[5] + r * p
    p = C[4] + r * p
    p = C[3] + r * p
    p = C[2] + r * p
    p = 1.0 + r * p
    p = 1.0 + r * p
    h = math.floor(kf * 0.5)
    k1 = _bits(h + SHIFT) - SHIFT_BITS
    k2 = _bits((kf - h) + SHIFT) - SHIFT_BITS
    res = (p * _from_bits((k1 + 1023) << 52)) * _from_bits((k2 + 1023) << 52)
    return res if x == x else x


@njit(cache=True, _nrt=False)
def exp_array_nb(x, out):
    """``out[i] = e^{x[i]}`` (:func:`exp_nb`) for 1-D arrays; returns ``out``."""
    for i in range(x.shape[0]):
        out[i] = exp_nb(x[i])
    return out


__all__ = ["exp_nb", "exp_array_nb"]
