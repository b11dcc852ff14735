"""Vectorizable math: ``exp`` as inline IR instead of a libm call.

A call to ``expf`` stops LLVM's loop vectorizer (there is no vector math library in the JIT),
so softmax and sigmoid ran at scalar speed.  ``exp`` is emitted inline with Cody-Waite range
reduction and the Cephes approximations (about 1 ulp):

    x = min(max(x, LO), HI)   (just past the range of finite, nonzero results: 89 / -110 for
                               float32, 710 / -750 for float64)
    n = roundeven(x * log2(e)),  r = x - n*C1 - n*C2           (C1 + C2 = ln 2, C1 exact)
    float32:  e^r = 1 + r + r^2 * P5(r)                        (minimax polynomial)
    float64:  e^r = 1 + 2 * r*P(r^2) / (Q(r^2) - r*P(r^2))     (Pade form)
    exp(x) = ldexp(e^r, n)  -- which overflows to inf and underflows to 0 (through correctly
    rounded subnormals) by itself; NaN stays NaN (one select).

``llvm.ldexp`` lowers to ``vscalef`` on AVX-512, so every step vectorizes; about 18
instructions per vector of 16 floats.
"""

from __future__ import annotations

import math

import llvmlite.ir as ir

from .irloops import declare

I32 = ir.IntType(32)

_F32 = dict(
    log2e=1.44269504088896341, c1=0.693359375, c2=-2.12194440e-4, hi_clamp=89.0,
    lo_clamp=-110.0, poly=(1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                         1.6666665459e-1, 5.0000001201e-1))
_F64 = dict(
    log2e=1.4426950408889634073599, c1=6.93145751953125e-1, c2=1.42860682030941723212e-6,
    hi_clamp=710.0, lo_clamp=-750.0,
    p=(1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1),
    q=(3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
       2.00000000000000000009e0))


def _horner(b: ir.IRBuilder, x: ir.Value, coeffs, flags) -> ir.Value:
    t = x.type
    acc = t(coeffs[0])
    for c in coeffs[1:]:
        acc = b.fadd(b.fmul(acc, x, flags=flags), t(c), flags=flags)
    return acc


def emit_exp(b: ir.IRBuilder, x: ir.Value, flags=()) -> ir.Value:
    """``exp(x)`` for a float or double ``x`` (see the module docstring)."""
    t = x.type
    is32 = isinstance(t, ir.FloatType)
    k = _F32 if is32 else _F64
    sfx = "f32" if is32 else "f64"
    rint = declare(b.module, f"llvm.roundeven.{sfx}", t, [t])
    ldexp = declare(b.module, f"llvm.ldexp.{sfx}.i32", t, [t, I32])
    lo = declare(b.module, f"llvm.maxnum.{sfx}", t, [t, t])
    hi = declare(b.module, f"llvm.minnum.{sfx}", t, [t, t])
    fl = flags
    # clamp (one min and one max instruction; NaN becomes a bound and is patched at the end) to
    # a range just past the representable results, so that n fits an i32 and ldexp itself
    # rounds the result to inf or to 0 (or a subnormal) outside [LO, HI]
    xin = x
    x = b.call(lo, [b.call(hi, [x, t(k["hi_clamp"])]), t(k["lo_clamp"])])
    n = b.call(rint, [b.fmul(x, t(k["log2e"]), flags=fl)])
    r = b.fsub(x, b.fmul(n, t(k["c1"]), flags=fl), flags=fl)
    r = b.fsub(r, b.fmul(n, t(k["c2"]), flags=fl), flags=fl)
    if is32:
        p = _horner(b, r, k["poly"], fl)
        rr = b.fmul(r, r, flags=fl)
        er = b.fadd(b.fadd(b.fmul(p, rr, flags=fl), r, flags=fl), t(1.0), flags=fl)
    else:
        rr = b.fmul(r, r, flags=fl)
        px = b.fmul(r, _horner(b, rr, k["p"], fl), flags=fl)
        q = _horner(b, rr, k["q"], fl)
        er = b.fadd(t(1.0), b.fmul(t(2.0), b.fdiv(px, b.fsub(q, px, flags=fl), flags=fl), flags=fl), flags=fl)
    val = b.call(ldexp, [er, b.fptosi(n, I32)])
    return b.select(b.fcmp_unordered("uno", xin, xin), xin, val)


# erf, float32: x * P(x^2) (Taylor, 7 terms) for |x| < 0.5, where 1 - erfc would lose the
# relative accuracy of small results; else 1 - erfc(|x|) with the Chebyshev-fitted
#   erfc(z) ~ t * exp(-z^2 + R(t)),  t = 1 / (1 + z/2)   (relative error < 1.2e-7 for z >= 0)
# and the sign of x copied back.  Both branches are computed and selected, so it vectorizes.
_ERF_TAYLOR = tuple(2 / math.sqrt(math.pi) * (-1) ** n / (math.factorial(n) * (2 * n + 1))
                    for n in reversed(range(7)))  # highest power first, for _horner
_ERFC_R = (0.17087277, -0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
           0.09678418, 0.37409196, 1.00002368, -1.26551223)


def emit_erf(b: ir.IRBuilder, x: ir.Value, flags=()) -> ir.Value:
    """``erf(x)``: inline for float (about 1e-7 relative error), libm ``erf`` for double."""
    t = x.type
    if not isinstance(t, ir.FloatType):
        return b.call(declare(b.module, "erf", t, [t]), [x])
    fl = flags
    fabs = declare(b.module, "llvm.fabs.f32", t, [t])
    copysign = declare(b.module, "llvm.copysign.f32", t, [t, t])
    z = b.call(fabs, [x])
    small = b.fmul(x, _horner(b, b.fmul(x, x, flags=fl), _ERF_TAYLOR, fl), flags=fl)
    tt = b.fdiv(t(1.0), b.fadd(t(1.0), b.fmul(z, t(0.5), flags=fl), flags=fl), flags=fl)
    arg = b.fsub(_horner(b, tt, _ERFC_R, fl), b.fmul(z, z, flags=fl), flags=fl)
    erfc = b.fmul(tt, emit_exp(b, arg, fl), flags=fl)
    large = b.call(copysign, [b.fsub(t(1.0), erfc, flags=fl), x])
    out = b.select(b.fcmp_ordered("<", z, t(0.5)), small, large)
    return b.select(b.fcmp_unordered("uno", x, x), x, out)
