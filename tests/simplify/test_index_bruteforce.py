"""Index reasoning checked by brute force: every rule on index expressions, against enumeration.

Random integer index expressions and conditions over two or three variables with small ranges
(lower bounds below zero too) are evaluated at every point of their box by a plain Python
interpreter written here (floor division and modulo as Python's), and compared with what the
index reasoning claims:

* linear forms (``tensorad/poly/linear.py``): ``from_linear(to_linear(e))`` equals ``e``;
* interval bounds (``simplify/algebra/ranges.py``): every value lies within ``bounds(e)``;
* the rewrite rules (``simplify_expr``): the simplified expression or condition is equal;
* the isl boundary (``tensorad/poly``): ``IndexSpace.aff`` and ``IndexSpace.cond`` converted
  back to IR (``to_expr``) are equal, isl counts the points of a condition exactly, solutions
  for a variable (``IndexSet.solve``) and its constant range hold at every point;
* nonzeroness (``simplify/zeros/nonzero.py``): ``nz(e)`` holds wherever ``e`` is nonzero, and
  ``assume(e, facts)`` equals ``e`` wherever the facts hold.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import examples
from tensorad.simplify import assume, simplify_expr
from tensorad.simplify.algebra.ranges import bounds
from tensorad.simplify.zeros.nonzero import nonzero

from tensorad.ir.expr import Expr, Op, binary, cast, choice, compare, const, logical, logical_not, unary, var
from tensorad.poly import IndexSpace
from tensorad.poly.domain import IndexSet
from tensorad.poly.linear import from_linear, to_linear
from tensorad.poly.to_expr import pieces_to_expr, pw_aff_pieces, set_to_cond

SETTINGS = dict(max_examples=examples(100), deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---- the oracle: a plain interpreter ------------------------------------------------------------

def run(e: Expr, env: dict):
    """Value of ``e`` at the point ``env`` (variables to ints), Python semantics."""
    op, s = e.op, e.src
    if op is Op.VAR:
        return env[e]
    if op is Op.CONST:
        return e.arg
    a = [run(x, env) for x in s] if op not in (Op.SELECT, Op.IF_THEN_ELSE) else None
    if op is Op.ADD:
        return a[0] + a[1]
    if op is Op.SUB:
        return a[0] - a[1]
    if op is Op.MUL:
        return a[0] * a[1]
    if op is Op.DIV:
        return a[0] / a[1]
    if op is Op.NEG:
        return -a[0]
    if op is Op.FLOORDIV:
        return a[0] // a[1] if not isinstance(a[0], float) else math.floor(a[0] / a[1])
    if op is Op.MOD:
        return a[0] % a[1]
    if op is Op.MAXIMUM:
        return max(a)
    if op is Op.MINIMUM:
        return min(a)
    if op in (Op.SELECT, Op.IF_THEN_ELSE):
        return run(s[1], env) if run(s[0], env) else run(s[2], env)
    if op is Op.CAST:
        if e.dtype.startswith("float"):
            return float(a[0])
        if e.dtype == "bool":
            return bool(a[0])
        return int(a[0])
    if op is Op.AND:
        return bool(a[0]) and bool(a[1])
    if op is Op.OR:
        return bool(a[0]) or bool(a[1])
    if op is Op.NOT:
        return not a[0]
    cmp = {Op.LT: lambda x, y: x < y, Op.LE: lambda x, y: x <= y, Op.GT: lambda x, y: x > y,
           Op.GE: lambda x, y: x >= y, Op.EQ: lambda x, y: x == y, Op.NE: lambda x, y: x != y}
    if op in cmp:
        return cmp[op](a[0], a[1])
    raise NotImplementedError(op)


def points(variables):
    for vals in itertools.product(*[range(v.lo, v.hi) for v in variables]):
        yield dict(zip(variables, vals))


# ---- random index expressions and conditions ------------------------------------------------------

@st.composite
def index_vars(draw):
    out = []
    for k in range(draw(st.integers(2, 3))):
        lo = draw(st.integers(-3, 1))
        out.append(var(f"v{k}", lo, lo + draw(st.integers(1, 5))))
    return out


def index_expr(draw, vs, depth):
    kinds = ["var", "var", "const"] + (["add", "sub", "neg", "mul", "div", "mod", "minmax", "select", "cast"]
                                       if depth > 0 else [])
    kind = draw(st.sampled_from(kinds))
    sub = lambda: index_expr(draw, vs, depth - 1)  # noqa: E731
    if kind == "var":
        return draw(st.sampled_from(vs))
    if kind == "const":
        return const(draw(st.integers(-4, 4)), "int32")
    if kind in ("add", "sub"):
        return binary(Op.ADD if kind == "add" else Op.SUB, sub(), sub())
    if kind == "neg":
        return unary(Op.NEG, sub())
    if kind == "mul":
        c = const(draw(st.integers(-3, 3)), "int32")
        x = sub()
        return binary(Op.MUL, *((c, x) if draw(st.booleans()) else (x, c)))
    if kind in ("div", "mod"):
        d = const(draw(st.integers(1, 5)), "int32")
        return binary(Op.FLOORDIV if kind == "div" else Op.MOD, sub(), d)
    if kind == "minmax":
        return binary(draw(st.sampled_from([Op.MAXIMUM, Op.MINIMUM])), sub(), sub())
    if kind == "cast":
        return cast("int32", cast("int64", sub()))
    return choice(Op.SELECT, index_cond(draw, vs, 0), sub(), sub())


def index_cond(draw, vs, depth):
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp"] + (["and", "or", "not"] if depth > 0 else [])))
    if kind == "cmp":
        op = draw(st.sampled_from([Op.LT, Op.LE, Op.GT, Op.GE, Op.EQ, Op.NE]))
        return compare(op, index_expr(draw, vs, 2), index_expr(draw, vs, 1))
    if kind == "not":
        return logical_not(index_cond(draw, vs, depth - 1))
    return logical(Op.AND if kind == "and" else Op.OR, index_cond(draw, vs, depth - 1),
                   index_cond(draw, vs, depth - 1))


@st.composite
def expr_case(draw):
    vs = draw(index_vars())
    return vs, index_expr(draw, vs, 3)


@st.composite
def cond_case(draw):
    vs = draw(index_vars())
    return vs, index_cond(draw, vs, 2)


def _same_everywhere(vs, a: Expr, b: Expr, what: str):
    for p in points(vs):
        assert run(a, p) == run(b, p), f"{what}: {a} != {b} at { {v.name: x for v, x in p.items()} }"


# ---- properties ---------------------------------------------------------------------------------

@settings(**SETTINGS)
@given(expr_case())
def test_linear_forms_round_trip(case):
    vs, e = case
    _same_everywhere(vs, e, from_linear(to_linear(e)), "from_linear(to_linear(e))")


@settings(**SETTINGS)
@given(expr_case(), st.integers(1, 5), st.integers(-3, 3), st.data())
def test_quotient_and_remainder_fold_back(case, c, m, data):
    """``m*c*(e // c) + m*(e % c) + rest`` is ``m*e + rest`` (linear.py folds it; floor
    semantics, negative values included), and the fold happens when ``e`` is affine."""
    vs, rest = case
    e = data.draw(st.sampled_from(vs)) * data.draw(st.integers(-2, 3)) + data.draw(st.integers(-4, 4))
    q = binary(Op.MUL, const(m * c, "int32"), binary(Op.FLOORDIV, e, const(c, "int32")))
    r = binary(Op.MUL, const(m, "int32"), binary(Op.MOD, e, const(c, "int32")))
    both = binary(Op.ADD, binary(Op.ADD, q, r), rest)
    folded = from_linear(to_linear(both))
    _same_everywhere(vs, both, folded, "quotient and remainder folded")
    if m and c > 1:
        assert not any(n.op in (Op.FLOORDIV, Op.MOD) and n.src[0] is e for n in _nodes(folded))


def _nodes(e: Expr):
    from tensorad.ir.rewrite import walk

    return list(walk(e))


@settings(**SETTINGS)
@given(expr_case())
def test_interval_bounds_contain_every_value(case):
    vs, e = case
    lo, hi = bounds(e)
    for p in points(vs):
        x = run(e, p)
        assert (lo is None or lo <= x) and (hi is None or x <= hi), f"{e} = {x} outside [{lo}, {hi}]"


@settings(**SETTINGS)
@given(expr_case())
def test_simplified_index_expressions_are_equal(case):
    vs, e = case
    _same_everywhere(vs, e, simplify_expr(e), "simplify_expr")


@settings(**SETTINGS)
@given(cond_case())
def test_simplified_conditions_are_equal(case):
    vs, c = case
    _same_everywhere(vs, c, simplify_expr(c), "simplify_expr")


@settings(**SETTINGS)
@given(expr_case())
def test_isl_functions_convert_back_exactly(case):
    vs, e = case
    space = IndexSpace(vs)
    back = pieces_to_expr(pw_aff_pieces(space.aff(e), space.vars))
    _same_everywhere(vs, e, back, "isl PwAff and back")


@settings(**SETTINGS)
@given(cond_case())
def test_isl_sets_convert_back_exactly_and_count(case):
    vs, c = case
    space = IndexSpace(vs)
    s = space.cond(c).intersect(space.box())
    back = set_to_cond(s, space.vars)
    _same_everywhere(vs, c, back, "isl set and back")
    assert IndexSet.from_conditions(vs, [c]).count() == sum(1 for p in points(vs) if run(c, p))


@settings(**SETTINGS)
@given(cond_case(), st.data())
def test_solutions_and_ranges_hold_at_every_point(case, data):
    vs, c = case
    v = data.draw(st.sampled_from(vs))
    # an equation that determines v on part of the box, and the random condition
    other = [u for u in vs if u is not v]
    eq = compare(Op.EQ, binary(Op.MUL, const(data.draw(st.sampled_from([1, 2, -1])), "int32"), v),
                 binary(Op.ADD, other[0], const(data.draw(st.integers(-2, 2)), "int32")))
    iset = IndexSet.from_conditions(vs, [c, eq])
    inside = [p for p in points(vs) if run(c, p) and run(eq, p)]
    assert iset.count() == len(inside)
    sol = iset.solve(v)
    if sol is not None:
        for p in inside:
            assert run(sol.value, p) == p[v], f"{v.name} = {sol.value} fails at {p}"
    if inside:
        lo, hi = iset.const_range(v)
        values = [p[v] for p in inside]
        assert lo <= min(values) and max(values) <= hi


@st.composite
def value_case(draw):
    """A float expression whose zeros come from index conditions (no reads)."""
    vs = draw(index_vars())

    def val(depth):
        nodes = ["gate", "gate", "add", "mul", "neg"] if depth else []
        kind = draw(st.sampled_from(["const", "ivalue"] + nodes))
        if kind == "const":
            return const(draw(st.sampled_from([0.0, 1.0, -2.5])), "float64")
        if kind == "ivalue":
            return cast("float64", index_expr(draw, vs, 1))
        if kind == "gate":
            op = draw(st.sampled_from([Op.SELECT, Op.IF_THEN_ELSE]))
            return choice(op, index_cond(draw, vs, 1), val(depth - 1), const(0.0, "float64"))
        if kind == "neg":
            return unary(Op.NEG, val(depth - 1))
        return binary(Op.ADD if kind == "add" else Op.MUL, val(depth - 1), val(depth - 1))

    return vs, val(3), index_cond(draw, vs, 1)


@settings(**SETTINGS)
@given(value_case())
def test_nonzeroness_holds_wherever_the_value_is_nonzero(case):
    vs, e, _ = case
    nz = nonzero(e)
    for p in points(vs):
        if run(e, p) != 0:
            assert run(nz, p), f"nz({e}) = {nz} is false at {p} where the value is {run(e, p)}"


@settings(**SETTINGS)
@given(value_case())
def test_assume_keeps_the_value_where_the_facts_hold(case):
    vs, e, fact = case
    simpler = assume(e, [fact])
    for p in points(vs):
        if run(fact, p):
            assert run(simpler, p) == run(e, p), f"assume({e}, {fact}) = {simpler} differs at {p}"


@st.composite
def float_cond_case(draw):
    """Comparisons of index values cast to float with non-integer constants."""
    vs = [var(f"v{k}", 0, draw(st.integers(1, 6))) for k in range(2)]
    e = cast("float64", index_expr(draw, vs, 2))
    scaled = binary(Op.MUL, e, const(draw(st.sampled_from([0.3, 0.5, 1.5, -0.25])), "float64"))
    op = draw(st.sampled_from([Op.LT, Op.LE, Op.GT, Op.GE]))
    return vs, compare(op, scaled, const(draw(st.sampled_from([1.0, 0.5, -0.7, 2.2])), "float64"))


@settings(**SETTINGS)
@given(float_cond_case())
def test_conditions_with_float_constants(case):
    """The rules, nonzeroness and the whole optimizer on ``select(float(e) * c < d, 1, 0)``."""
    import numpy as np

    import tensorad as ta
    from tensorad.ir.rewrite import substitute

    vs, c = case
    _same_everywhere(vs, c, simplify_expr(c), "simplify_expr")
    gated = choice(Op.SELECT, c, const(1.0, "float64"), const(0.0, "float64"))
    nz = nonzero(gated)
    for p in points(vs):
        if run(gated, p):
            assert run(nz, p), f"nz({gated}) = {nz} is false at {p}"
    t = ta.compute(tuple(v.hi for v in vs), lambda *ax: substitute(gated, dict(zip(vs, ax))), name="T")
    want, got = ta.evaluate([t, ta.OptimizeAndLiftNonzeronessConditions(t)], {})
    np.testing.assert_array_equal(got, want)
