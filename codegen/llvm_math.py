"""Vectorizable math: ``exp`` as inline IR instead of a libm call.

A call to ``expf`` stops LLVM's loop vectorizer (there is no vector math library in the JIT),
so softmax and sigmoid ran at scalar speed.  ``exp`` is emitted inline with Cody-Waite range
reduction and the Cephes approximations (about 1 ulp):

    n = floor(x * log2(e) + 1/2),  r = x - n*C1 - n*C2        (C1 + C2 = ln 2, C1 exact)
    float32:  e^r = 1 + r + r^2 * P5(r)                        (minimax polynomial)
    float64:  e^r = 1 + 2 * r*P(r^2) / (Q(r^2) - r*P(r^2))     (Pade form)
    exp(x) = ldexp(e^r, n);   x > MAX -> inf, x < MIN -> 0, NaN stays NaN.

``llvm.ldexp`` lowers to ``vscalef`` on AVX-512, so every step vectorizes.
"""

from __future__ import annotations

import llvmlite.ir as ir

from .irloops import declare

I32 = ir.IntType(32)

_F32 = dict(
    log2e=1.44269504088896341, c1=0.693359375, c2=-2.12194440e-4, hi=88.72283905206835,
    lo=-103.97208, poly=(1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                         1.6666665459e-1, 5.0000001201e-1))
_F64 = dict(
    log2e=1.4426950408889634073599, c1=6.93145751953125e-1, c2=1.42860682030941723212e-6,
    hi=709.782712893384, lo=-745.1332191019411,
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
    floor = declare(b.module, f"llvm.floor.{sfx}", t, [t])
    ldexp = declare(b.module, f"llvm.ldexp.{sfx}.i32", t, [t, I32])
    fl = flags
    # clamp first so that n fits an i32 (a plain fptosi vectorizes, a saturating one does not);
    # out-of-range and NaN inputs are patched at the end
    xin = x
    x = b.select(b.fcmp_ordered(">", x, t(k["hi"])), t(k["hi"]), x)
    x = b.select(b.fcmp_ordered("<", x, t(k["lo"])), t(k["lo"]), x)
    x = b.select(b.fcmp_unordered("uno", x, x), t(0.0), x)
    n = b.call(floor, [b.fadd(b.fmul(x, t(k["log2e"]), flags=fl), t(0.5), flags=fl)])
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
    val = b.select(b.fcmp_ordered(">", xin, t(k["hi"])), t(float("inf")), val)
    val = b.select(b.fcmp_ordered("<", xin, t(k["lo"])), t(0.0), val)
    return b.select(b.fcmp_unordered("uno", xin, xin), xin, val)
