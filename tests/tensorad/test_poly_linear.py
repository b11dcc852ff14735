"""The one linear-form module (tensorad/poly/linear.py) and its isl conversion, by brute force.

Random integer index expressions -- ``+ - *`` by constants (also constant sub-expressions),
``//`` and ``%`` by constants (negative ones too, which isl does not take), nested, over
variables with negative lower bounds, with constants past int32 and past int64 -- are
evaluated by a plain Python interpreter written here (floor semantics, exact ints) and
compared with

* the linear form: ``const + sum(coef * atom)``, each atom evaluated by the interpreter,
  equals the expression at every point of the box;
* its isl objects: the graph of ``IndexSpace.aff(e)`` over the box holds exactly the points
  ``(x, e(x))`` the enumeration finds, and ``IndexSpace.cond(e op c)`` exactly the points
  where the comparison holds.
"""

from __future__ import annotations

import itertools

import islpy as isl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify.algebra.consts import evaluate_scalar
from tensorad.simplify.algebra.ranges import bounds

from tensorad.ir.expr import Expr, Op, binary, cast, compare, const, unary, var
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.domain import IndexSet
from tensorad.poly.linear import Linear, from_linear, solve_for, to_linear, var_coefficients

SETTINGS = dict(max_examples=examples(150), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
I64 = "int64"


def run(e: Expr, env: dict) -> int:
    """The value of integer expression ``e`` at ``env``, with Python's exact floor semantics."""
    op, s = e.op, e.src
    if op is Op.VAR:
        return env[e]
    if op is Op.CONST:
        return int(e.arg)
    if op is Op.CAST:
        return run(s[0], env)
    if op is Op.NEG:
        return -run(s[0], env)
    a, b = run(s[0], env), run(s[1], env)
    if op is Op.FLOORDIV:
        return a // b
    if op is Op.MOD:
        return a % b
    return {Op.ADD: a + b, Op.SUB: a - b, Op.MUL: a * b, Op.MAXIMUM: max(a, b), Op.MINIMUM: min(a, b)}[op]


def points(variables):
    for vals in itertools.product(*[range(v.lo, v.hi) for v in variables]):
        yield dict(zip(variables, vals))


BIG = st.sampled_from([2**31 - 1, 2**31, 2**33 + 5, 3 * 2**40, 2**62 + 7, 2**70 + 3])


@st.composite
def constants(draw) -> int:
    c = draw(st.one_of(st.integers(-6, 6), BIG))
    return -c if draw(st.booleans()) else c


def index_expr(draw, vs, depth: int) -> Expr:
    kinds = ["var", "var", "const"] + (["add", "sub", "neg", "mul", "mul", "mulform", "div", "mod", "div",
                                        "mod", "minmax", "cast", "product"] if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    sub = lambda: index_expr(draw, vs, depth - 1)  # noqa: E731
    if kind == "var":
        return draw(st.sampled_from(vs))
    if kind == "const":
        return const(draw(constants()), I64)
    if kind in ("add", "sub"):
        return binary(Op.ADD if kind == "add" else Op.SUB, sub(), sub())
    if kind == "neg":
        return unary(Op.NEG, sub())
    if kind == "mul":
        c = const(draw(st.one_of(st.integers(-3, 3), BIG)), I64)
        x = sub()
        return binary(Op.MUL, *((c, x) if draw(st.booleans()) else (x, c)))
    if kind == "mulform":  # a constant written as an expression: x * (5 - 3)
        c = binary(Op.SUB, const(draw(st.integers(-4, 4)), I64), const(draw(st.integers(-4, 4)), I64))
        return binary(Op.MUL, sub(), c)
    if kind in ("div", "mod"):
        d = draw(st.one_of(st.integers(1, 6), st.integers(-4, -1), st.just(2**35)))
        return binary(Op.FLOORDIV if kind == "div" else Op.MOD, sub(), const(d, I64))
    if kind == "minmax":
        return binary(draw(st.sampled_from([Op.MAXIMUM, Op.MINIMUM])), sub(), sub())
    if kind == "product":  # not linear: an atom of the form, not quasi-affine for isl
        return binary(Op.MUL, sub(), sub())
    return cast(I64, cast("int32", draw(st.sampled_from(vs))))  # casts between integer types


@st.composite
def expr_case(draw):
    vs = []
    for k in range(draw(st.integers(1, 3))):
        lo = draw(st.integers(-4, 2))
        vs.append(var(f"v{k}", lo, lo + draw(st.integers(1, 5)), dtype=I64))
    return vs, index_expr(draw, vs, draw(st.integers(1, 4)))


def _form_value(e: Expr, env: dict) -> int:
    f = to_linear(e)
    return f.const + sum(k * run(atom, env) for atom, k in f.terms)


def _isl_points(s: isl.Set) -> set[tuple[int, ...]]:
    out: set[tuple[int, ...]] = set()
    n = s.dim(isl.dim_type.set)
    s.foreach_point(lambda p: out.add(tuple(p.get_coordinate_val(isl.dim_type.set, k).to_python()
                                            for k in range(n))))
    return out


def _not_quasi_affine(e: Expr) -> bool:
    """Whether ``e`` holds a node isl cannot take: a division by a non-positive constant or a
    product of two non-constant expressions."""
    from tensorad.ir.rewrite import walk

    for n in walk(e):
        if n.op in (Op.FLOORDIV, Op.MOD) and int(n.src[1].arg) <= 0:
            return True
        if n.op is Op.MUL and not (to_linear(n.src[0]).is_const or to_linear(n.src[1]).is_const):
            return True
    return False


@settings(**SETTINGS)
@given(expr_case())
def test_the_linear_form_equals_the_expression_at_every_point(case):
    vs, e = case
    back = from_linear(to_linear(e), I64)
    for p in points(vs):
        want = run(e, p)
        assert _form_value(e, p) == want, f"form of {e} at {p}"
        assert run(back, p) == want, f"from_linear(to_linear({e})) at {p}"


@settings(**SETTINGS)
@given(expr_case(), st.integers(-3, 3), st.sampled_from([Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE]))
def test_isl_objects_hold_exactly_the_enumerated_points(case, delta, op):
    vs, e = case
    space = IndexSpace(vs)
    try:
        pa = space.aff(e)
    except NotAffine:
        assert _not_quasi_affine(e), f"{e} is quasi-affine but did not convert"
        return
    box = space.box()
    graph = isl.Map.from_pw_aff(pa).intersect_domain(box).wrap()
    values = {p_: run(e, p) for p in points(vs) for p_ in [tuple(p[v] for v in vs)]}
    assert _isl_points(graph) == {k + (x,) for k, x in values.items()}
    # a comparison near a value the expression takes (so the set is neither empty nor all)
    c = values[min(values)] + delta
    cond = space.cond(compare(op, e, const(c, I64))).intersect(box)
    cmp = {Op.LT: lambda x: x < c, Op.LE: lambda x: x <= c, Op.GT: lambda x: x > c,
           Op.GE: lambda x: x >= c, Op.EQ: lambda x: x == c, Op.NE: lambda x: x != c}[op]
    assert _isl_points(cond) == {k for k, x in values.items() if cmp(x)}


@settings(**SETTINGS)
@given(expr_case(), st.integers(-3, 3), st.data())
def test_a_solution_for_a_variable_holds_exactly_where_the_equation_does(case, delta, data):
    """``solve_for(e - c, v)``: ``e == c`` exactly where ``v == g`` (``g`` free of ``v``)."""
    vs, e = case
    v = data.draw(st.sampled_from(vs))
    e = binary(Op.ADD, e, v) if data.draw(st.booleans()) else binary(Op.SUB, e, v)
    c = run(e, dict(zip(vs, [x.lo for x in vs]))) + delta
    g = solve_for(to_linear(e) - Linear((), c), v)
    if g is None:
        return
    value = from_linear(g, I64)
    for p in points(vs):
        assert (run(e, p) == c) == (p[v] == run(value, {**p, v: None})), f"{e} == {c} vs {v} == {value}"


def test_float_arithmetic_is_an_atom_never_truncated():
    i = var("i", 0, 8)
    half = cast("int32", cast("float32", i) * 0.5)  # not index arithmetic: no coefficient of i
    assert var_coefficients(half) is None
    assert var_coefficients(half + 2 * i) is None
    assert to_linear(half).terms == ((half, 1),)
    assert var_coefficients(cast(I64, 3 * i - 1) + i) == {None: -1, i: 4}
    with pytest.raises(NotAffine, match="not a quasi-affine index expression"):
        IndexSpace([i]).aff(half)


def test_a_deep_sum_converts_without_recursion():
    i = var("i", 0, 4)
    e = i
    for k in range(5000):
        e = e + 1 if k % 2 else e - 2
    assert to_linear(e).terms == ((i, 1),) and to_linear(e).const == -2500
    pa = IndexSpace([i]).aff(e)
    assert pa.is_equal(IndexSpace([i]).aff(i - 2500))
    assert bounds(e) == (-2500, -2497)  # (interval bounds: simplify/algebra/ranges.py)


@pytest.mark.parametrize("c", [2**31 + 1, -(2**40) - 3, 2**62 + 7, 2**70 + 3, -(2**70) - 5])
def test_constants_past_64_bits_come_back_from_isl_exactly(c):
    """``k == 3*i + c`` solved for ``k`` and ``k``'s range: isl's values read back exactly
    (``get_num_si`` truncated them: the solution lost its constant)."""
    i, k = var("i", 0, 5, I64), var("k", c - 3, c + 30, I64)
    dom = IndexSet.from_conditions([i, k], [k == 3 * i + const(c, I64)])
    sol = dom.solve(k)
    assert [evaluate_scalar(sol.value, {i: x}) for x in range(5)] == [3 * x + c for x in range(5)]
    assert dom.const_range(k) == (c, c + 12)
