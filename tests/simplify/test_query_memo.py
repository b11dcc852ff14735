"""The isl questions of one optimizer call are memoized in its context (for the time bar).

* the emptiness of a sum's domain (``factor.nonempty_where``) is asked of isl once per condition
  and the variables it mentions, however many sums and nestings share them: counted by the
  context's ``counts``, never timed;
* asked over fewer variables, the answer is still exact: checked against brute-force
  enumeration for random conditions, with variables the condition does not mention (and
  ones with an empty range, which empty the whole domain).
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify import Optimizer, OptimizerContext
from tensorad.simplify.algebra.logic import all_of
from tensorad.simplify.algebra.rules import simplify_expr
from tensorad.simplify.sums.factor import nonempty_where

import tensorad as ta
from tensorad import autodiff
from tensorad.ir import reducer
from tensorad.ir.expr import FALSE, TRUE, Expr, Op, ReduceArg, const, var
from tensorad.ir.rewrite import substitute

SUM = reducer.sum.instantiate(("float32",))


def _strided_conv_relu_gradient() -> Optimizer:
    X = ta.placeholder((2, 3, 9, 9), name="X")
    W = ta.placeholder((4, 3, 3, 3), name="W")
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, 2, 1))
    H = ta.placeholder(Y.shape, name="H")
    opt = Optimizer()
    opt.finish(autodiff.jacobian_recursive(Y, [X, W], H, optimizer=opt))
    return opt


def test_emptiness_questions_are_asked_once_per_condition(monkeypatch):
    import tensorad.simplify.sums.factor as factor

    asked = []
    real = factor.nonempty_where
    monkeypatch.setattr(factor, "nonempty_where", lambda *a, **k: asked.append(1) or real(*a, **k))
    opt = _strided_conv_relu_gradient()
    # the strided convolution's adjoints ask 33 times (each sum, each nesting tried) about a
    # handful of padding conditions; without the memo isl computed every one of them
    computed = opt.context.counts["nonempty"]
    assert computed == len(opt.context.nonempty)  # each question once
    assert len(asked) >= 30 and 1 <= computed <= 12


def test_a_memoized_answer_is_the_answer():
    ctx = OptimizerContext()
    i, k = var("i", 0, 6), var("k", 0, 4)
    j = var("j", 0, 3)  # an axis the condition does not mention
    cond = (i - k >= 1) & (i - k < 3)
    red = Expr(Op.REDUCE, "float32", (cond, const(1.0)), ReduceArg(SUM, (k,), 0))
    first = nonempty_where((i, j), red, ctx)
    assert ctx.counts["nonempty"] == 1
    other = Expr(Op.REDUCE, "float32", (cond, const(2.0)), ReduceArg(SUM, (k,), 0))
    assert nonempty_where((j, i), other, ctx) is first  # another source, the axes in another order
    assert ctx.counts["nonempty"] == 1


def _holds(cond: Expr, point: dict) -> bool:
    out = simplify_expr(substitute(cond, {v: const(x, v.dtype) for v, x in point.items()}))
    assert out is TRUE or out is FALSE, out
    return out is TRUE


_AXES = [var("a", 0, 4), var("b", 0, 3), var("c", 0, 2)]
_RVARS = [var("r", 0, 3), var("s", -1, 2), var("t", 0, 2), var("e", 0, 0)]  # e: an empty range

atom = st.tuples(st.lists(st.tuples(st.integers(0, 6), st.integers(-2, 2)),
                          min_size=1, max_size=3),
                 st.integers(-3, 3), st.sampled_from(["<=", "==", "mod"]))


def _atom_holds(spec, pool: list[Expr], at: dict) -> bool:
    terms, c, kind = spec
    e = c + sum(at[pool[v % len(pool)]] * k for v, k in terms)
    return e <= 0 if kind == "<=" else e == 0 if kind == "==" else e % 2 == 0


def _cond(spec, pool: list[Expr]) -> Expr:
    terms, c, kind = spec
    e: Expr = const(c, "int32")
    for v, k in terms:
        e = e + pool[v % len(pool)] * k
    return {"<=": lambda: e <= 0, "==": lambda: e == 0, "mod": lambda: e % 2 == 0}[kind]()


@settings(max_examples=examples(40), deadline=None)
@given(st.lists(atom, min_size=1, max_size=3), st.lists(st.booleans(), min_size=4, max_size=4))
def test_emptiness_over_the_mentioned_variables_is_exact(specs, summed):
    rvars = [r for r, keep in zip(_RVARS, summed) if keep] or [_RVARS[0]]
    pool = _AXES + [r for r in rvars if r.hi > r.lo]
    cond = all_of([_cond(s, pool) for s in specs])
    red = Expr(Op.REDUCE, "float32", (cond, const(1.0)), ReduceArg(SUM, tuple(rvars), 0))
    where = nonempty_where(_AXES, red, OptimizerContext())
    assert where is not None
    for point in itertools.product(*(range(v.lo, v.hi) for v in _AXES)):
        at = dict(zip(_AXES, point))
        want = any(all(_atom_holds(s, pool, at | dict(zip(rvars, inner))) for s in specs)
                   for inner in itertools.product(*(range(r.lo, r.hi) for r in rvars)))
        assert _holds(where, at) == want, (cond, rvars, point)


def test_a_sum_is_proved_zero_once_per_call(monkeypatch):
    import tensorad.simplify.zeros.polynomial as polynomial

    built = []
    real = polynomial._Builder
    monkeypatch.setattr(polynomial, "_Builder", lambda *a, **k: built.append(1) or real(*a, **k))
    X = ta.placeholder((3, 4), name="X")
    k = ta.reduce_axis((0, 4), "k")
    Z = ta.compute((3,), lambda i: ta.sum(X[i, k] * 2.0 - X[i, k] - X[i, k], k), name="Z")  # = 0
    ctx = OptimizerContext()
    body = Z.op.body[0]
    assert polynomial.provably_zero(body, ctx) and polynomial.provably_zero(body, ctx)
    assert len(built) == 1 and ctx.zero[body] is True
    assert polynomial.provably_zero(body) and len(built) == 2  # no context: no memo


def test_sums_equal_up_to_their_axes_are_proved_once_and_expand_a_read_once(monkeypatch):
    # each bracket of a long chain's adjoints asks about the same sum over its own fresh axis:
    # proved again per axis, every read expanded (substituted, simplified) again per proof
    import tensorad.simplify.zeros.polynomial as polynomial

    X = ta.placeholder((4,), name="X")
    T = ta.compute((4,), lambda i: X[i] * 2.0 - X[i], name="T")
    U = ta.compute((4,), lambda i: T[i] - X[i], name="U")  # = 0
    ctx = OptimizerContext(refute=False)
    sums = [ta.sum(U[r], r) for r in (ta.reduce_axis((0, 4), n) for n in "rst")]
    assert len(set(sums)) == 3 and all(polynomial.provably_zero(s, ctx) for s in sums)
    assert ctx.counts["zero-proof"] == 1
    V = ta.compute((4,), lambda i: U[i] + X[i] * X[i], name="V")  # = X^2: not zero
    subs = []
    real = polynomial.substitute
    monkeypatch.setattr(polynomial, "substitute", lambda *a: subs.append(1) or real(*a))
    for n in "uvw":
        r = ta.reduce_axis((0, 4), n)
        assert not polynomial.provably_zero(ta.sum(V[r] * (r == 2).astype("float32"), r), ctx)
        assert not polynomial.provably_zero(ta.sum(V[r] * X[r], r), ctx)
    assert len(subs) == 1 and ctx.counts["zero-proof"] == 3  # (V's body, once)


def test_a_condition_is_converted_to_isl_once_per_call(monkeypatch):
    from tensorad.simplify.sums.eliminate import space_of, split_affine

    from tensorad.poly.affine import IndexSpace
    from tensorad.poly.domain import IndexSet

    converted = []
    real = IndexSpace._atom
    monkeypatch.setattr(IndexSpace, "_atom", lambda self, c, *a: converted.append(c) or real(self, c, *a))
    i, k = var("i", 0, 6), var("k", 0, 4)
    conds = [i - k >= 1, 2 * k <= i + 3]
    ctx = OptimizerContext()
    affine, residual = split_affine(conds, [i, k], ctx)
    dom = IndexSet.from_conditions([i, k], affine, space_of([i, k], ctx))
    assert residual == [] and not dom.is_empty()
    assert len(converted) == 2  # classified and intersected: one conversion each
    split_affine(conds, [i, k])  # without a context, each call converts afresh
    assert len(converted) == 4
