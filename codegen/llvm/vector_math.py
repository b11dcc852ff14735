"""Vector math as inline IR: exp, log, tanh, sigmoid, erf and pow with no library calls.

A call to ``expf`` stops LLVM's loop vectorizer, and ``llvm.ldexp`` or ``llvm.roundeven`` become libm
calls on CPUs without the instruction, so every function uses operations every x86-64 CPU has in vector
form, on float or double scalars or vectors.  Two bit tricks:

* **round to an integer**: ``t = v + M``, ``M = 1.5 * 2^23`` (``1.5 * 2^52`` for double), rounds ``v``
  (``|v| < 2^22``) into the last mantissa bits of ``t``: ``n = t - M``, as an integer ``bits(t) - bits(M)``;
* **scale by 2^n**: ``2^k`` has the bits ``(k + bias) << mantissa_bits``; ``x * 2^n = (x * 2^(n >> 1)) *
  2^(n - (n >> 1))``: both factors normal, rounding once, correctly into the subnormals, 0 and inf.

The functions (Cephes' polynomials for exp and tanh, the atanh series for log, fits for erf from
``tools/fit_erf.py``; about 1 ulp, tested in ``tests/codegen/test_vector_math.py``):

    exp(x)   = 2^n e^r,  n = round(x log2 e),  r = x - n C1 - n C2      (C1 + C2 = ln 2, C1 short)
    log(x)   = e ln 2 + 2 atanh(f / (2 + f)),  x = 2^e (1 + f),  1 + f in [sqrt(1/2), sqrt(2))
    tanh(x)  = x + x^3 P(x^2) for |x| < 0.625, else sign(x) (1 - 2 / (exp(2|x|) + 1))
    sigmoid  = 1 / (1 + t) for x >= 0, t / (1 + t) for x < 0,  t = exp(-|x|)
    erf(x)   = x P(2x^2 - 1) for |x| < 1, else sign(x) (1 - exp(-x^2) Q(|x|))
    pow(x,y) = exp(y log|x|) with the IEEE special cases; float32 in float64, float64 in
               double-double (:func:`_exp_dd`), rounded once: exact powers stay exact

NaN inputs give NaN, infinities and zeros the IEEE limits (exp(-inf) = 0, log(0) = -inf, erf(-inf) = -1)."""

from __future__ import annotations

import math

import llvmlite.ir as ir

from .ir_loops import declare

CONTRACT = ("contract",)  # fused multiply-adds allowed; no reassociation (Cody-Waite needs order)

_EXP = {
    "float32": dict(log2e=1.44269504088896341, c1=0.693359375, c2=-2.12194440e-4, hi=89.0, lo=-104.0,
                    poly=(1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
                          1.6666665459e-1, 5.0000001201e-1)),
    "float64": dict(log2e=1.4426950408889634073599, c1=6.93145751953125e-1, c2=1.42860682030941723212e-6,
                    hi=710.0, lo=-746.0,
                    p=(1.26177193074810590878e-4, 3.02994407707441961300e-2, 9.99999999999999999910e-1),
                    q=(3.00198505138664455042e-6, 2.52448340349684104192e-3, 2.27265548208155028766e-1,
                       2.00000000000000000009e0)),
}
_LOG_TERMS = {"float32": 5, "float64": 11}  # terms of T(u) = sum_k 2 u^k / (2k + 1), u <= 0.0295
_TANH = {
    "float32": dict(p=(-5.70498872745e-3, 2.06390887954e-2, -5.37397155531e-2, 1.33314422036e-1,
                       -3.33332819422e-1)),
    "float64": dict(p=(-9.64399179425052238628e-1, -9.92877231001918586564e1, -1.61468768441708447952e3),
                    q=(1.0, 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3)),
}
# erf pieces fitted by tools/fit_erf.py (highest degree first): |x| < 1: x * SMALL(2x^2 - 1);
# float32: 1 <= |x| < HI: 1 - exp(-x^2) ONE((2|x| - 1 - HI) / (HI - 1)); float64:
# 1 <= |x| < 2.5: 1 - exp(-x^2) MID((x - 1.75) / 0.75); 2.5 <= |x| < HI: 1 - exp(-x^2) TAIL(s) / |x|
_ERF = {
    "float32": dict(hi=4.0, small=(
        -1.766908081197942e-05, 0.00021935945001758258, -0.0022854195288921145, 0.019851804925181918,
        -0.14053609728153707, 0.9654687771263063,), one=(
        9.640451525152444e-05, -0.000245502587717269, 0.0003678686723926149, -0.0009155637844761307,
        0.002425885101277224, -0.005611762780083814, 0.012484035685726026, -0.026997791384281364,
        0.05611095841163573, -0.1115214013906552, 0.21080635752833898,)),
    "float64": dict(hi=6.0, small=(
        -2.033691978340166e-14, -3.8640147588463154e-13, 9.262831432596225e-12, -2.0350774310004103e-10,
        4.1157016182063514e-09, -7.511570747427961e-08, 1.2233827878170113e-06, -1.7537169435008102e-05,
        0.00021751715602946013, -0.0022854855611451567, 0.019852496688984887, -0.14053608902271708,
        0.9654687386698672,), mid=(
        -8.134767913360665e-12, 4.8825542087532155e-11, -2.162349024345572e-10, 1.0761138170462249e-09,
        -5.407725407118747e-09, 2.6216037353200642e-08, -1.236648465449189e-07, 5.680071745806124e-07,
        -2.5345090529507147e-06, 1.0962896956395992e-05, -4.5856167382316614e-05, 0.00018495607769407633,
        -0.0007168914456405712, 0.0026591791242518573, -0.009390935492449713, 0.0313670419239853,
        -0.09823225913586454, 0.2849722347374364,), tail=(
        -1.0544286169298092e-09, 3.337207188777079e-09, -5.681411789470218e-09, 1.7877371623994744e-08,
        -6.4184348777387e-08, 1.9300207585566644e-07, -5.612761610408734e-07, 1.6301759746376358e-06,
        -4.643515348976384e-06, 1.2916758761255167e-05, -3.505303352563126e-05, 9.253987194679755e-05,
        -0.0002367083740615123, 0.0005833913615367216, -0.0013739042566960386, 0.0030502899610099494,
        -0.0062288179864218056, 0.011080765979300175, 0.5497174178404486,)),
}
_LN2_HI, _LN2_LO = 0.693359375, -2.121944400546905827679e-4  # e * _LN2_HI is exact for |e| < 2^14
_MAGIC = {"float32": 12582912.0, "float64": 6755399441055744.0}  # 1.5 * 2^23, 1.5 * 2^52
_BITS = {"float32": (32, 23, 127), "float64": (64, 52, 1023)}  # width, mantissa bits, bias


class _Math:
    """Typed helpers over one builder for a float/double scalar or vector type."""

    def __init__(self, b: ir.IRBuilder, t: ir.Type) -> None:
        self.b, self.t = b, t
        self.lanes = t.count if isinstance(t, ir.VectorType) else None
        el = t.element if isinstance(t, ir.VectorType) else t
        self.dtype = "float32" if isinstance(el, ir.FloatType) else "float64"
        width, self.mbits, self.bias = _BITS[self.dtype]
        self.it = ir.IntType(width) if self.lanes is None else ir.VectorType(ir.IntType(width), self.lanes)
        self.sfx = ("f32" if self.dtype == "float32" else "f64") if self.lanes is None else \
            f"v{self.lanes}{'f32' if self.dtype == 'float32' else 'f64'}"

    def c(self, v: float) -> ir.Constant:
        return ir.Constant(self.t, v if self.lanes is None else [v] * self.lanes)

    def ic(self, v: int) -> ir.Constant:
        return ir.Constant(self.it, v if self.lanes is None else [v] * self.lanes)

    def add(self, x, y):
        return self.b.fadd(x, y, flags=CONTRACT)

    def sub(self, x, y):
        return self.b.fsub(x, y, flags=CONTRACT)

    def mul(self, x, y):
        return self.b.fmul(x, y, flags=CONTRACT)

    def div(self, x, y):
        return self.b.fdiv(x, y)

    def exact_add(self, x, y):  # no contraction: the rounding of this sum is the point
        return self.b.fadd(x, y)

    def exact_sub(self, x, y):
        return self.b.fsub(x, y)

    def horner(self, x, coeffs):
        acc = self.c(coeffs[0])
        for co in coeffs[1:]:
            acc = self.add(self.mul(acc, x), self.c(co))
        return acc

    def call(self, name: str, *args):
        fn = declare(self.b.module, f"llvm.{name}.{self.sfx}", self.t, [self.t] * len(args))
        return self.b.call(fn, list(args))

    def fabs(self, x):
        return self.call("fabs", x)

    def copysign(self, x, sign):
        return self.call("copysign", x, sign)

    def clamp(self, x, lo: float, hi: float):
        """``min(max(x, lo), hi)``, NaN passing through: ``x < lo ? lo : x`` is one x86 ``max``, which
        returns its second operand when either is NaN."""
        lo_c, hi_c = self.c(lo), self.c(hi)
        x = self.sel(self.cmp("<", x, lo_c), lo_c, x)
        return self.sel(self.cmp(">", x, hi_c), hi_c, x)

    def cmp(self, op: str, x, y):
        return self.b.fcmp_ordered(op, x, y)

    def isnan(self, x):
        return self.b.fcmp_unordered("uno", x, x)

    def sel(self, c, x, y):
        return self.b.select(c, x, y)

    def bits(self, x):
        return self.b.bitcast(x, self.it)

    def from_bits(self, i):
        return self.b.bitcast(i, self.t)

    def round_int(self, v):
        """``(n, n as an integer)``: ``v`` rounded to the nearest integer (``|v| < 2^22``)."""
        m = self.c(_MAGIC[self.dtype])
        t = self.exact_add(v, m)
        return self.exact_sub(t, m), self.b.sub(self.bits(t), self.bits(m))

    def int_to_float(self, i):
        """A small integer (``|i| < 2^22``) as a float, exactly, without ``sitofp``."""
        m = self.c(_MAGIC[self.dtype])
        return self.exact_sub(self.from_bits(self.b.add(self.bits(m), i)), m)

    def pow2(self, k):
        """``2^k`` for an integer ``k`` of the normal exponent range."""
        return self.from_bits(self.b.shl(self.b.add(k, self.ic(self.bias)), self.ic(self.mbits)))

    def scale(self, x, n):
        """``x * 2^n`` rounded once, for ``n`` down to ``-(bias + mbits + 3)`` (see the module
        docstring): two normal factors ``2^(n >> 1)`` and ``2^(n - (n >> 1))``."""
        half = self.b.ashr(n, self.ic(1))
        return self.b.fmul(self.b.fmul(x, self.pow2(half)), self.pow2(self.b.sub(n, half)))


def _exp_core(m: _Math, x, normal: bool = False):
    """``exp`` of a non-NaN ``x`` (the callers patch NaN); ``normal``: ``x`` lies in ``[-80, 0]``
    (float64: ``[-700, 0]``), so the result is normal: no clamp, one scaling."""
    k = _EXP[m.dtype]
    if not normal:
        x = m.clamp(x, k["lo"], k["hi"])  # past the range of finite, nonzero results
    n, ni = m.round_int(m.mul(x, m.c(k["log2e"])))
    r = m.sub(x, m.mul(n, m.c(k["c1"])))  # n * C1 is exact (C1 has few bits)
    r = m.sub(r, m.mul(n, m.c(k["c2"])))
    rr = m.mul(r, r)
    if m.dtype == "float32":
        er = m.add(m.add(m.mul(m.horner(r, k["poly"]), rr), r), m.c(1.0))
    else:  # Pade form: e^r = 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2))
        px = m.mul(r, m.horner(rr, k["p"]))
        er = m.add(m.c(1.0), m.mul(m.c(2.0), m.div(px, m.sub(m.horner(rr, k["q"]), px))))
    return m.b.fmul(er, m.pow2(ni)) if normal else m.scale(er, ni)


def emit_exp(b: ir.IRBuilder, x: ir.Value, flags=()) -> ir.Value:
    """``exp(x)`` (``flags`` are ignored: see :data:`CONTRACT`)."""
    m = _Math(b, x.type)
    return _exp_core(m, x)  # (NaN passes the clamp, and every step after it)


def _log_parts(m: _Math, x):
    """``(e, f)`` with ``x = 2^e (1 + f)``, ``1 + f`` in ``[sqrt(1/2), sqrt(2))``, for positive
    finite ``x`` (subnormals are scaled by ``2^mbits`` first); ``e`` as a float."""
    b = m.b
    tiny = m.cmp("<", x, m.from_bits(m.ic(1 << m.mbits)))  # below the smallest normal
    xs = m.sel(tiny, m.mul(x, m.c(float(2 ** m.mbits))), x)
    adj = m.sel(tiny, m.ic(-m.mbits), m.ic(0))
    bits = m.bits(xs)
    e = b.add(b.sub(b.lshr(bits, m.ic(m.mbits)), m.ic(m.bias - 1)), adj)  # xs = 2^e * mant, mant in [1/2, 1)
    mant_mask = (1 << m.mbits) - 1
    mant = m.from_bits(b.or_(b.and_(bits, m.ic(mant_mask)), m.ic((m.bias - 1) << m.mbits)))
    low = m.cmp("<", mant, m.c(0.70710678118654752440))
    e = b.sub(e, b.zext(low, m.it))
    f = m.sub(m.sel(low, m.exact_add(mant, mant), mant), m.c(1.0))
    return m.int_to_float(e), f


def _log1p_reduced(m: _Math, f):
    """``log(1 + f)`` for ``f`` in ``[sqrt(1/2) - 1, sqrt(2) - 1]``: with ``s = f / (2 + f)``,
    ``log(1 + f) = 2 atanh(s) = 2s + s T(s^2)``, ``T(u) = sum_k 2 u^k / (2k + 1)`` (``|s| <= 0.172``: 5
    terms for float, 11 for double), and ``2s = f - s f``, so ``log(1 + f) = f - s (f - T)``."""
    s = m.div(f, m.add(m.c(2.0), f))
    u = m.mul(s, s)
    coeffs = [2.0 / (2 * k + 1) for k in range(_LOG_TERMS[m.dtype], 0, -1)] + [0.0]
    t = m.horner(u, coeffs)
    return m.sub(f, m.mul(s, m.sub(f, t)))


def _log_finite(m: _Math, x):
    """``log(x)`` for positive finite ``x``: ``e ln2_hi + (log(1 + f) + e ln2_lo)``."""
    e, f = _log_parts(m, x)
    return m.add(m.add(_log1p_reduced(m, f), m.mul(e, m.c(_LN2_LO))), m.mul(e, m.c(_LN2_HI)))


def emit_log(b: ir.IRBuilder, x: ir.Value, flags=()) -> ir.Value:
    """``log(x)``: -inf at 0, NaN below 0, inf at inf."""
    m = _Math(b, x.type)
    r = _log_finite(m, x)
    r = m.sel(m.cmp("==", x, m.c(float("inf"))), x, r)
    r = m.sel(m.cmp("==", x, m.c(0.0)), m.c(float("-inf")), r)
    r = m.sel(m.cmp("<", x, m.c(0.0)), m.c(float("nan")), r)
    return m.sel(m.isnan(x), x, r)


def emit_tanh(b: ir.IRBuilder, x: ir.Value, flags=()) -> ir.Value:
    """``tanh(x)`` (see the module docstring)."""
    m = _Math(b, x.type)
    a = m.fabs(x)
    z = m.mul(x, x)
    if m.dtype == "float32":
        small = m.add(m.mul(m.mul(m.horner(z, _TANH["float32"]["p"]), z), x), x)
    else:
        k = _TANH["float64"]
        small = m.add(m.mul(m.mul(x, z), m.div(m.horner(z, k["p"]), m.horner(z, k["q"]))), x)
    small = m.copysign(small, x)  # tanh is odd: tanh(-0) = -0 (the polynomial gives +0 there)
    e = _exp_core(m, m.add(a, a))
    big = m.copysign(m.sub(m.c(1.0), m.div(m.c(2.0), m.add(e, m.c(1.0)))), x)
    return m.sel(m.cmp("<", a, m.c(0.625)), small, big)  # (NaN: the big piece, whose exp passes it)


def emit_sigmoid(b: ir.IRBuilder, x: ir.Value, flags=()) -> ir.Value:
    """``1 / (1 + exp(-x))`` without overflow: ``t = exp(-|x|)`` is at most 1."""
    m = _Math(b, x.type)
    t = _exp_core(m, m.b.fneg(m.fabs(x)))
    s = m.div(m.c(1.0), m.add(m.c(1.0), t))
    return m.sel(m.cmp("<", x, m.c(0.0)), m.mul(t, s), s)  # (NaN: exp passes it to s)


def emit_erf(b: ir.IRBuilder, x: ir.Value, flags=()) -> ir.Value:
    """``erf(x)`` from three fitted pieces (see the module docstring)."""
    m = _Math(b, x.type)
    k = _ERF[m.dtype]
    hi = k["hi"]
    a = m.fabs(x)
    small = m.mul(x, m.horner(m.sub(m.mul(m.add(x, x), x), m.c(1.0)), k["small"]))
    ac = m.clamp(a, 1.0, hi)  # (NaN: patched below)
    g = _exp_core(m, m.b.fneg(m.mul(ac, ac)), normal=True)  # (-x^2 in [-hi^2, -1])
    if "one" in k:
        q = m.horner(m.sub(m.mul(ac, m.c(2 / (hi - 1))), m.c((1 + hi) / (hi - 1))), k["one"])
    else:
        mid = m.horner(m.mul(m.sub(ac, m.c(1.75)), m.c(1 / 0.75)), k["mid"])
        span = hi - 2.5
        tail = m.div(m.horner(m.sub(m.mul(ac, m.c(2 / span)), m.c((2.5 + hi) / span)), k["tail"]), ac)
        q = m.sel(m.cmp("<", ac, m.c(2.5)), mid, tail)
    # past hi, 1 - g q rounds to 1: the clamp gives +-1, also at +-inf; NaN takes the small piece (NaN)
    big = m.copysign(m.sub(m.c(1.0), m.mul(g, q)), x)
    return m.sel(m.b.fcmp_unordered("<", a, m.c(1.0)), small, big)


def _int_parity(m: _Math, y):
    """``(is_integer, is_odd)`` of ``y`` without ``floor`` (see the module docstring)."""
    b = m.b
    a = m.fabs(y)
    big = m.c(float(2 ** m.mbits))
    large = m.cmp(">=", a, big)  # every float this large is an integer (inf too)
    v = m.sel(large, a, m.exact_add(a, big))  # below 2^mbits: the integer part in the low bits
    is_int = b.or_(large, m.cmp("==", m.exact_sub(v, big), a))
    odd_bit = b.icmp_unsigned("!=", b.and_(m.bits(v), m.ic(1)), m.ic(0))
    in_range = m.cmp("<", v, m.c(float(2 ** (m.mbits + 1))))
    return is_int, b.and_(is_int, b.and_(in_range, odd_bit))


def _two_product(m: _Math, x, y):
    """``(p, err)``: ``p = fl(x * y)`` and ``x * y = p + err`` (Dekker's product with
    Veltkamp's split, no FMA needed); ``err`` is 0 where the split overflows."""
    def split(v):
        c = m.b.fmul(v, m.c(134217729.0))  # 2^27 + 1
        hi = m.exact_sub(c, m.exact_sub(c, v))
        return hi, m.exact_sub(v, hi)

    p = m.b.fmul(x, y)
    xh, xl = split(x)
    yh, yl = split(y)
    err = m.exact_add(m.exact_add(m.exact_add(m.exact_sub(m.b.fmul(xh, yh), p), m.b.fmul(xh, yl)),
                                  m.b.fmul(xl, yh)), m.b.fmul(xl, yl))
    return p, m.sel(m.isnan(err), m.c(0.0), err)


def _two_sum(m: _Math, x, y):
    """``(s, err)``: ``s = fl(x + y)`` and ``x + y = s + err`` (Knuth; no ordering needed)."""
    s = m.exact_add(x, y)
    bb = m.exact_sub(s, x)
    err = m.exact_add(m.exact_sub(x, m.exact_sub(s, bb)), m.exact_sub(y, bb))
    return s, m.sel(m.isnan(err), m.c(0.0), err)


def _log_split(m: _Math, x):
    """``log|x|`` as three doubles ``(e ln2_hi, 2 s_hi, small)`` carrying about 70 bits: the first two exact,
    ``small = 2 s_lo + s_hi T(s_hi^2) + e ln2_lo``; ``s = s_hi + s_lo = f / (2 + f)`` in double-double, ``s_lo
    = (f - s_hi d_hi - s_hi d_lo) / d_hi``, ``2 + f = d_hi + d_lo``.  For positive finite ``|x|``."""
    a = m.fabs(x)
    e, f = _log_parts(m, m.sel(m.cmp("==", a, m.c(0.0)), m.c(1.0), a))
    two = m.c(2.0)
    d_hi = m.exact_add(two, f)
    d_lo = m.exact_add(m.exact_sub(two, d_hi), f)  # (|2| >= |f|: Fast2Sum)
    s_hi = m.div(f, d_hi)
    p, perr = _two_product(m, s_hi, d_hi)
    r = m.exact_sub(m.exact_sub(m.exact_sub(f, p), perr), m.b.fmul(s_hi, d_lo))
    s_lo = m.div(r, d_hi)
    u = m.mul(s_hi, s_hi)
    t = m.horner(u, [2.0 / (2 * k + 1) for k in range(_LOG_TERMS[m.dtype], 0, -1)] + [0.0])
    small = m.exact_add(m.exact_add(m.exact_add(s_lo, s_lo), m.b.fmul(s_hi, t)), m.b.fmul(e, m.c(_LN2_LO)))
    return m.b.fmul(e, m.c(_LN2_HI)), m.exact_add(s_hi, s_hi), small


_LN2_C3 = -2.3407938865678234e-23  # ln 2 - C1 - C2 for float64's C1, C2 (_EXP): ln 2 to ~2^-130
_EXP_TAYLOR = [1.0 / math.factorial(k) for k in range(15, 1, -1)]  # e^r = 1 + r + r^2 (1/2! + ... r^13/15!)


def _exp_dd(m: _Math, s, t):
    """``exp(s + t)`` in float64 for a double-double ``s + t`` (``|t| <= ulp(s)``), rounded once: reduced
    in double-double (``r = rh + rl``, ``ln 2`` to 130 bits), ``e^rh = 1 + rh + rh^2 Q(rh)`` kept as
    ``h + lo + q``, ``e^r = e^rh (1 + rl)``.  Under 0.3 ulp before rounding: exact powers stay exact."""
    k = _EXP["float64"]
    s = m.clamp(s, k["lo"], k["hi"])  # past the range of finite, nonzero results
    n, ni = m.round_int(m.mul(s, m.c(k["log2e"])))
    r1 = m.exact_sub(s, m.b.fmul(n, m.c(k["c1"])))  # exact: n C1 has few bits, and is near s
    p, pe = _two_product(m, n, m.c(k["c2"]))
    rh, rt = _two_sum(m, r1, m.b.fneg(p))
    rl = m.exact_add(m.exact_sub(m.exact_sub(rt, pe), m.b.fmul(n, m.c(_LN2_C3))), t)
    q = m.b.fmul(m.b.fmul(rh, rh), m.horner(rh, _EXP_TAYLOR))
    h, lo = _two_sum(m, m.c(1.0), rh)
    tail = m.exact_add(m.exact_add(lo, q), m.b.fmul(rl, m.exact_add(h, q)))  # e^rl e^rh ~ (1 + rl)(h + q)
    return m.scale(m.exact_add(h, tail), ni)


def emit_pow(b: ir.IRBuilder, x: ir.Value, y: ir.Value, flags=()) -> ir.Value:
    """``x ** y`` with NumPy's (C99's) special cases; float32 computes in plain float64."""
    m = _Math(b, x.type)
    if m.dtype == "float32":
        dt = ir.DoubleType() if m.lanes is None else ir.VectorType(ir.DoubleType(), m.lanes)
        return b.fptrunc(_pow64(b, b.fpext(x, dt), b.fpext(y, dt), double_double=False), x.type)
    return _pow64(b, x, y, double_double=True)


def _pow_magnitude(m: _Math, x, y, double_double: bool):
    """``(s, exp(s))``, ``s = y log|x|``; ``double_double``: ``s`` in two doubles, ``exp`` rounded once."""
    if not double_double:
        a = m.fabs(x)
        s = m.mul(y, _log_finite(m, m.sel(m.cmp("==", a, m.c(0.0)), m.c(1.0), a)))
        return s, _exp_core(m, s)
    l1, l2, l3 = _log_split(m, x)
    p1, e1 = _two_product(m, y, l1)  # y log|x| = p1 + p2 + (e1 + e2 + y l3), p1 and p2 exact products
    p2, e2 = _two_product(m, y, l2)
    hi, e3 = _two_sum(m, p1, p2)
    s, e4 = _two_sum(m, hi, m.exact_add(m.exact_add(m.exact_add(e1, e2), e3), m.b.fmul(y, l3)))
    # past |s| = 1000 exp(s) is inf or 0 either way, and the error terms may be inf or NaN: no correction
    err = m.sel(m.cmp("<", m.fabs(s), m.c(1000.0)), e4, m.c(0.0))
    return s, _exp_dd(m, s, err)


def _pow64(b: ir.IRBuilder, x: ir.Value, y: ir.Value, double_double: bool) -> ir.Value:
    m = _Math(b, x.type)
    a = m.fabs(x)
    s, mag = _pow_magnitude(m, x, y, double_double)
    mag = m.sel(m.isnan(s), m.c(0.0), mag)  # (y = +-inf or |x| in {0, inf}: set below)
    # limits of exp(y log|x|) at |x| = 0 and |x| = inf (log = -inf / inf)
    zero, inf = m.c(0.0), m.c(float("inf"))
    ypos = m.cmp(">", y, zero)
    at0 = m.sel(ypos, zero, inf)
    atinf = m.sel(ypos, inf, zero)
    mag = m.sel(m.cmp("==", a, zero), at0, mag)
    mag = m.sel(m.cmp("==", a, inf), atinf, mag)
    # y = +-inf: |x| < 1 -> 0 / inf, |x| > 1 -> inf / 0, |x| = 1 -> 1
    yinf = m.cmp("==", m.fabs(y), inf)
    lt1 = m.cmp("<", a, m.c(1.0))
    yi = m.sel(lt1, m.sel(ypos, zero, inf), m.sel(ypos, inf, zero))
    yi = m.sel(m.cmp("==", a, m.c(1.0)), m.c(1.0), yi)
    mag = m.sel(yinf, yi, mag)
    is_int, odd = _int_parity(m, y)
    neg = b.icmp_signed("<", m.bits(x), m.ic(0))  # the sign bit (-0 included)
    r = m.sel(b.and_(neg, odd), b.fneg(mag), mag)
    nan = m.c(float("nan"))
    r = m.sel(b.and_(m.cmp("<", x, zero), b.and_(m.cmp(">", x, m.c(float("-inf"))), b.not_(is_int))), nan, r)
    r = m.sel(b.or_(m.isnan(x), m.isnan(y)), m.add(x, y), r)
    one = m.c(1.0)
    return m.sel(b.or_(m.cmp("==", y, zero), m.cmp("==", x, one)), one, r)
