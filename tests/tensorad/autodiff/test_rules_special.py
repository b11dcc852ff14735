"""The tangent rule table at special points: +-inf, +-0, subnormals and huge values.

Each float rule is applied once and twice (first and second derivatives, as the HVP does) to a
function of one variable ``x`` and compared with the float64 limit of its closed form, written
here and evaluated with mpmath just inside the special point (``+-10^4000`` for ``+-inf``,
``+-10^-4000`` for ``+-0``), beyond float64's range, so the float of the result is the limit.
A formula's ``inf * 0`` where the true limit is finite is a wrong answer (``erf''``
of an empty min reduction, +inf, was NaN); a NaN is right only where the true derivative
is undefined (sin at inf, log below 0).
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import partial_by_read
from tensorad.autodiff.zero import materialize
from tensorad.ir import Op

F = "float64"
INF = math.inf
TINY = 5e-324  # the smallest subnormal
HUGE = 1.7e308  # 2x overflows
ALL = (-INF, -HUGE, -1e300, -30.0, -1.5, -0.0, 0.0, TINY, 2e-308, 0.7, 1.5, 30.0, 1e300, HUGE, INF)
NONNEG = tuple(p for p in ALL if math.copysign(1, p) > 0)
FINITE = tuple(p for p in ALL if math.isfinite(p))
MODERATE = tuple(p for p in FINITE if abs(p) < 1e30)  # in float32's range


def _sign(x):
    return mp.mpf(1) if x > 0 else mp.mpf(-1) if x < 0 else mp.mpf(0)


def _sigmoid(x):
    return 1 / (1 + mp.exp(-x))


# (name, op, body(x, y), points of x, y, f'(x, y), f''(x, y)): derivatives by x, y fixed data
CASES = [
    ("add", Op.ADD, lambda x, y: x + y, ALL, 2.0, lambda x, y: 1, lambda x, y: 0),
    ("sub", Op.SUB, lambda x, y: y - x, ALL, 2.0, lambda x, y: -1, lambda x, y: 0),
    ("neg", Op.NEG, lambda x, y: -x, ALL, 0.0, lambda x, y: -1, lambda x, y: 0),
    ("mul", Op.MUL, lambda x, y: x * y, ALL, 3.0, lambda x, y: y, lambda x, y: 0),
    ("square", Op.MUL, lambda x, y: x * x, ALL, 0.0, lambda x, y: 2 * x, lambda x, y: 2),
    ("div_num", Op.DIV, lambda x, y: x / y, ALL, 3.0, lambda x, y: 1 / y, lambda x, y: 0),
    ("div_den", Op.DIV, lambda x, y: y / x, ALL, 3.0, lambda x, y: -y / x**2, lambda x, y: 2 * y / x**3),
    ("mod_num", Op.MOD, lambda x, y: x % y, MODERATE, 0.7, lambda x, y: 1, lambda x, y: 0),
    ("mod_den", Op.MOD, lambda x, y: y % x, (0.3, 0.5, 2.0, 1e300, INF), 0.7,
     lambda x, y: -mp.floor(y / x), lambda x, y: 0),
    ("floordiv", Op.FLOORDIV, lambda x, y: x // y + x, MODERATE, 0.7, lambda x, y: 1, lambda x, y: 0),
    ("pow_sqrt", Op.POW, lambda x, y: ta.power(x, y), NONNEG, 0.5,
     lambda x, y: y * x ** (y - 1), lambda x, y: y * (y - 1) * x ** (y - 2)),
    ("pow_1.5", Op.POW, lambda x, y: ta.power(x, y), NONNEG, 1.5,
     lambda x, y: y * x ** (y - 1), lambda x, y: y * (y - 1) * x ** (y - 2)),
    ("pow_-1.5", Op.POW, lambda x, y: ta.power(x, y), NONNEG, -1.5,
     lambda x, y: y * x ** (y - 1), lambda x, y: y * (y - 1) * x ** (y - 2)),
    ("pow_const_3", Op.POW, lambda x, y: ta.power(x, 3.0), ALL, 0.0,
     lambda x, y: 3 * x**2, lambda x, y: 6 * x),
    ("exp2", Op.POW, lambda x, y: ta.power(y, x), ALL, 2.0,
     lambda x, y: y**x * mp.log(y), lambda x, y: y**x * mp.log(y) ** 2),
    ("exp_half", Op.POW, lambda x, y: ta.power(y, x), ALL, 0.5,
     lambda x, y: y**x * mp.log(y), lambda x, y: y**x * mp.log(y) ** 2),
    # a^b by b where a^b is constant: 0^b (b > 0) and inf^b (b < 0)
    ("zero_base", Op.POW, lambda x, y: ta.power(y, x), (TINY, 0.5, 3.0, 1e300, INF), 0.0,
     lambda x, y: 0, lambda x, y: 0),
    ("inf_base", Op.POW, lambda x, y: ta.power(y, x), (-INF, -1e300, -3.0, -0.5, -TINY), INF,
     lambda x, y: 0, lambda x, y: 0),
    ("maximum", Op.MAXIMUM, lambda x, y: ta.maximum(x, y), ALL, 0.0,
     lambda x, y: 1 if x > 0 else 0.5 if x == 0 else 0, lambda x, y: 0),
    ("minimum", Op.MINIMUM, lambda x, y: ta.minimum(x, y), ALL, 1.5,
     lambda x, y: 1 if x < y else 0.5 if x == y else 0, lambda x, y: 0),
    ("select", Op.SELECT, lambda x, y: ta.select(x > y, x * x, -x), ALL, 0.0,
     lambda x, y: 2 * x if x > 0 else -1, lambda x, y: 2 if x > 0 else 0),
    ("if_then_else", Op.IF_THEN_ELSE, lambda x, y: ta.if_then_else(x > y, x * x, -x), ALL, 0.0,
     lambda x, y: 2 * x if x > 0 else -1, lambda x, y: 2 if x > 0 else 0),
    ("cast", Op.CAST, lambda x, y: ta.cast(F, ta.cast("float32", x)), MODERATE, 0.0,
     lambda x, y: 1, lambda x, y: 0),
    ("abs", Op.ABS, lambda x, y: ta.abs(x), ALL, 0.0, lambda x, y: _sign(x), lambda x, y: 0),
    ("exp", Op.EXP, lambda x, y: ta.exp(x), ALL, 0.0, lambda x, y: mp.exp(x), lambda x, y: mp.exp(x)),
    ("log", Op.LOG, lambda x, y: ta.log(x), NONNEG, 0.0, lambda x, y: 1 / x, lambda x, y: -1 / x**2),
    ("sqrt", Op.SQRT, lambda x, y: ta.sqrt(x), NONNEG, 0.0,
     lambda x, y: 1 / (2 * mp.sqrt(x)), lambda x, y: -1 / (4 * x * mp.sqrt(x))),
    ("tanh", Op.TANH, lambda x, y: ta.tanh(x), ALL, 0.0,
     lambda x, y: mp.sech(x) ** 2, lambda x, y: -2 * mp.tanh(x) * mp.sech(x) ** 2),
    ("sigmoid", Op.SIGMOID, lambda x, y: ta.sigmoid(x), ALL, 0.0,
     lambda x, y: _sigmoid(x) * _sigmoid(-x),
     lambda x, y: _sigmoid(x) * _sigmoid(-x) * (1 - 2 * _sigmoid(x))),
    ("sin", Op.SIN, lambda x, y: ta.sin(x), ALL, 0.0,
     lambda x, y: mp.cos(x), lambda x, y: -mp.sin(x)),
    ("cos", Op.COS, lambda x, y: ta.cos(x), ALL, 0.0,
     lambda x, y: -mp.sin(x), lambda x, y: -mp.cos(x)),
    ("erf", Op.ERF, lambda x, y: ta.erf(x), ALL, 0.0,
     lambda x, y: 2 / mp.sqrt(mp.pi) * mp.exp(-x * x), lambda x, y: -4 * x / mp.sqrt(mp.pi) * mp.exp(-x * x)),
]

# ops with no float rule of their own to test here: leaves, integer and boolean ops (their
# tangent is 0 without a rule; comparisons and logic are exercised by the selects above), and
# reductions (combiners: the empty-reduction test below)
NOT_HERE = {Op.VAR, Op.CONST, Op.READ, Op.DATA_INDEX, Op.REDUCE, Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ,
            Op.NE, Op.AND, Op.OR, Op.NOT}
UNDEFINED = {("sin", INF), ("sin", -INF), ("cos", INF), ("cos", -INF)}  # no limit: NaN is right


def _inside(p: float) -> mp.mpf:
    """A stand-in for ``p`` just inside it, beyond float64: the closed form's limit there."""
    return mp.mpf(10) ** (4000 if math.isinf(p) else -4000) * math.copysign(1, p)


def _want(formula, points, y) -> np.ndarray:
    """``formula`` at each point: exactly at a finite one (the rules' value at a kink), its
    limit at +-inf and at a pole (+-0, from the side of the zero's sign)."""
    out = []
    with mp.workdps(40):
        for p in points:
            yy = _inside(y) if math.isinf(y) else mp.mpf(y)
            try:
                v = formula(_inside(p) if math.isinf(p) else mp.mpf(p), yy)
            except ZeroDivisionError:
                v = formula(_inside(p), yy)
            out.append(float(v) if np.isreal(complex(v)) else math.nan)
    return np.array(out)


def _derivatives(body, n: int, dtype: str = F):
    """``(D1, D2)`` tensors: the table applied once and twice to ``body(X[i], Y[i])`` by ``X[i]``."""
    x = ta.placeholder((n,), dtype, name="X")
    y = ta.placeholder((n,), dtype, name="Y")

    def d(order):
        def element(i):
            e = body(x[i], y[i])
            for _ in range(order):
                e = materialize(partial_by_read(e, x[i]), dtype)
            return e
        return ta.compute((n,), element, name=f"D{order}")

    return x, y, d(1), d(2)


def test_the_cases_walk_every_op():
    assert {op for _, op, *_ in CASES} | NOT_HERE == set(Op)
    assert not {op for _, op, *_ in CASES} & NOT_HERE


@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_derivatives_at_special_points(case):
    name, op, body, points, yv, f1, f2 = case
    x, y, d1, d2 = _derivatives(body, len(points))
    data = {x: np.array(points), y: np.full(len(points), yv)}
    for order, t, formula in ((1, d1, f1), (2, d2, f2)):
        got = ta.evaluate(t, data)
        want = _want(formula, points, yv)
        for p, g, w in zip(points, got, want):
            if (name, p) in UNDEFINED:
                w = math.nan
            # NaN and inf exactly; finite values to rounding (1 - tanh^2 cancels: atol)
            ok = (math.isnan(g) and math.isnan(w)) or g == w or (
                math.isfinite(w) and abs(g - w) <= 1e-12 * abs(w) + 1e-15)
            assert ok, f"{name}: derivative {order} at x = {p!r} is {g!r}, the limit is {w!r}"


def _erf_textbook(v):
    return ta.exp(-(v * v)) * (2 / math.sqrt(math.pi))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erf_derivative_keeps_its_bits_at_finite_points(dtype):
    """erf' is the textbook ``2/sqrt(pi) e^(-x^2)`` bit for bit wherever ``e^(-x^2)`` is a
    normal number, and 0 where it is subnormal or 0 (no operation of the derivative has a
    subnormal operand, which costs a microcode assist on x86), evaluated and compiled; its
    second derivative is 0, not NaN, at +-inf and where 2x overflows."""
    big = np.finfo(dtype).max
    grid = np.concatenate([np.linspace(-40, 40, 4001), [-big, -1e19, -31.99, 31.99, 32.0, 32.01, 1e19, big],
                           np.geomspace(1e-40, 1e38, 60), -np.geomspace(1e-40, 1e38, 60)]).astype(dtype)
    grid = grid[np.isfinite(grid)]
    x, _, d1, d2 = _derivatives(lambda v, _: ta.erf(v), len(grid), dtype)
    ref = ta.compute(grid.shape, lambda i: _erf_textbook(x[i]), name="R")
    kernel = ta.build([d1, ref], [x])
    got, want = kernel(grid)
    with np.errstate(over="ignore"):  # e^(-x^2) a normal number
        normal = np.exp(-(grid.astype(np.float64) ** 2)) >= np.finfo(dtype).tiny
    want = np.where(normal, want, np.zeros_like(want))
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
    evaluated = ta.evaluate(ref, {x: grid})
    np.testing.assert_array_equal(ta.evaluate(d1, {x: grid}), np.where(normal, evaluated, 0))
    assert (got[~normal] == 0).all() and normal.sum() < len(grid)  # (the grid reaches past it)
    special = np.array([-np.inf, -big, big, np.inf], dtype)
    x2, _, _, d2 = _derivatives(lambda v, _: ta.erf(v), 4, dtype)
    np.testing.assert_array_equal(ta.build([d2], [x2])(special), np.zeros(4, dtype))
    np.testing.assert_array_equal(ta.evaluate(d2, {x2: special}), np.zeros(4, dtype))


def test_hvp_through_erf_of_an_empty_min_is_zero():
    """Rows 2.. of ``min(X[k], where=i < 2)`` are empty (+inf), erf
    of them is 1 and does not depend on X; the HVP there is 0, not inf * 0 = NaN."""
    n = 4
    x = ta.placeholder((n,), F, name="X")
    v = ta.placeholder((n,), F, name="V")
    k = ta.reduce_axis((0, n), name="k")
    m = ta.compute((n,), lambda i: ta.min(x[k] * 0.5, axis=k, where=i < 2), name="M")
    e = ta.compute((n,), lambda i: ta.erf(m[i] + x[i]), name="E")
    r = ta.reduce_axis((0, n), name="r")
    s = ta.compute((), lambda: ta.sum(e[r], axis=r), name="S")
    (hv,) = ta.hessian_vector_product(s, [x], [v])
    xs = np.array([0.3, -0.2, 0.5, 0.1])
    vs = np.array([1.0, -2.0, 0.5, 3.0])
    got = ta.evaluate(hv, {x: xs, v: vs})
    # rows 0, 1: erf(min(x)/2 + x_i), min(x)/2 = x_1 / 2; rows 2, 3: erf(inf) = 1, constant
    u = xs[1] / 2 + xs[:2]
    d1 = 2 / np.sqrt(np.pi) * np.exp(-u * u)
    d2 = -2 * u * d1
    grad_u = np.array([[1.0, 0.5, 0, 0], [0, 1.5, 0, 0]])  # du_i / dx
    want = sum(d2[i] * grad_u[i] * (grad_u[i] @ vs) for i in range(2))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ta.build([hv], [x, v])(xs, vs), want, rtol=1e-12, atol=1e-15)
