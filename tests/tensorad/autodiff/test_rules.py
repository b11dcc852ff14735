"""The tangent rule table: every op has a rule, and every rule agrees with finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.autodiff import TANGENT_RULES, ZERO, jacobian, jvp, partial_by_read, tangent
from tensorad.ir import Op
from tensorad.ir.expr import data_index
from tensorad.ir.rewrite import walk

F = "float64"


def test_every_op_has_a_tangent_rule():
    missing = [op.name for op in Op if op not in TANGENT_RULES]
    assert not missing, f"ops without a derivative rule: {missing}"


def test_a_missing_rule_is_a_clear_error():
    a = ta.placeholder((2,), F, name="A")
    body = ta.exp(a[0])
    table = {op: fn for op, fn in TANGENT_RULES.items() if op is not Op.EXP}
    with pytest.raises(ta.ir.MissingRuleError, match="EXP"):
        tangent(body, lambda n: ta.const(1.0, F) if n.op is Op.READ else ZERO, table)


# op -> (body over a = A[i], b = B[i] and the index i, data range of A, data range of B)
# B is positive where a rule needs it (log, sqrt, division, powers).
CASES = {
    Op.VAR: (lambda a, b, i: a * ta.cast(F, i) + b, (-1, 1), (-1, 1)),
    Op.CONST: (lambda a, b, i: a * 2.5 + ta.const(1.0, F), (-1, 1), (-1, 1)),
    Op.ADD: (lambda a, b, i: a + b, (-1, 1), (-1, 1)),
    Op.SUB: (lambda a, b, i: a - b, (-1, 1), (-1, 1)),
    Op.MUL: (lambda a, b, i: a * b, (-1, 1), (-1, 1)),
    Op.DIV: (lambda a, b, i: a / b, (-1, 1), (0.5, 1.5)),
    Op.FLOORDIV: (lambda a, b, i: a // b + a * ta.cast(F, (i - 5) // 3), (-1, 1), (0.3, 0.7)),
    Op.MOD: (lambda a, b, i: a % b + ta.cast(F, (i - 5) % 3), (-1, 1), (0.3, 0.7)),
    Op.NEG: (lambda a, b, i: -a * b, (-1, 1), (-1, 1)),
    Op.POW: (lambda a, b, i: ta.power(b, a) + ta.power(b, 3.0), (-1, 1), (0.5, 1.5)),
    Op.MAXIMUM: (lambda a, b, i: ta.maximum(a, b), (-1, 1), (-1, 1)),
    Op.MINIMUM: (lambda a, b, i: ta.minimum(a, b), (-1, 1), (-1, 1)),
    Op.LT: (lambda a, b, i: ta.select(a < b, a * 2.0, b * 3.0), (-1, 1), (-1, 1)),
    Op.LE: (lambda a, b, i: ta.select(a <= b, a * 2.0, b * 3.0), (-1, 1), (-1, 1)),
    Op.GT: (lambda a, b, i: ta.select(a > b, a * 2.0, b * 3.0), (-1, 1), (-1, 1)),
    Op.GE: (lambda a, b, i: ta.select(a >= b, a * 2.0, b * 3.0), (-1, 1), (-1, 1)),
    Op.EQ: (lambda a, b, i: ta.select(i == 2, a * 2.0, b * 3.0), (-1, 1), (-1, 1)),
    Op.NE: (lambda a, b, i: ta.select(i != 2, a * 2.0, b * 3.0), (-1, 1), (-1, 1)),
    Op.AND: (lambda a, b, i: ta.select((a < b) & (i > 0), a, b), (-1, 1), (-1, 1)),
    Op.OR: (lambda a, b, i: ta.select((a < b) | (i > 2), a, b), (-1, 1), (-1, 1)),
    Op.NOT: (lambda a, b, i: ta.select(~(a < b), a, b), (-1, 1), (-1, 1)),
    Op.SELECT: (lambda a, b, i: ta.select(a * b > 0, a * b, ta.exp(b)), (-1, 1), (-1, 1)),
    Op.IF_THEN_ELSE: (lambda a, b, i: ta.if_then_else(i < 2, ta.sin(a), b * b), (-1, 1), (-1, 1)),
    Op.CAST: (lambda a, b, i: ta.cast(F, ta.cast("float32", a)) * b + ta.cast(F, ta.cast("int32", b)),
              (-1, 1), (0.1, 0.9)),
    Op.EXP: (lambda a, b, i: ta.exp(a * b), (-1, 1), (-1, 1)),
    Op.LOG: (lambda a, b, i: ta.log(b) * a, (-1, 1), (0.5, 1.5)),
    Op.SQRT: (lambda a, b, i: ta.sqrt(b + a * 0.25), (-1, 1), (0.5, 1.5)),
    Op.TANH: (lambda a, b, i: ta.tanh(a + b), (-1, 1), (-1, 1)),
    Op.SIGMOID: (lambda a, b, i: ta.sigmoid(a * b), (-1, 1), (-1, 1)),
    Op.ABS: (lambda a, b, i: ta.abs(a - b), (-1, 1), (-1, 1)),
    Op.SIN: (lambda a, b, i: ta.sin(a * b), (-1, 1), (-1, 1)),
    Op.COS: (lambda a, b, i: ta.cos(a + b), (-1, 1), (-1, 1)),
    Op.ERF: (lambda a, b, i: ta.erf(a * b + a), (-1, 1), (-1, 1)),
    Op.DATA_INDEX: (lambda a, b, i: a * ta.cast(F, data_index(i + 2, 5, "wrap")) + b, (-1, 1), (-1, 1)),
}


def _program(op):
    body, _, _ = CASES[op]
    a = ta.placeholder((5,), F, name="A")
    b = ta.placeholder((5,), F, name="B")
    y = ta.compute((5,), lambda i: body(a[i], b[i], i), name="Y")
    return y, a, b


def _data(op, rng, a, b):
    _, ra, rb = CASES[op]
    return {a: rng.uniform(*ra, size=5), b: rng.uniform(*rb, size=5)}


def test_the_cases_cover_every_scalar_op():
    # READ and REDUCE are differentiated by every test in this folder (jacobian deltas, reducers)
    assert set(CASES) | {Op.READ, Op.REDUCE} == set(Op)


@pytest.mark.parametrize("op", list(CASES), ids=lambda op: op.name)
def test_rule_matches_finite_differences(op, rng, numeric_grad):
    y, a, b = _program(op)
    assert any(n.op is op for n in walk(y.op.body[0])), "the case must use its op"
    data = _data(op, rng, a, b)
    eps, tol = (1e-3, 1e-4) if op is Op.CAST else (1e-6, 1e-7)

    def forward(av, bv):
        return ta.evaluate(y, {a: av, b: bv})

    want_a, want_b = numeric_grad(forward, [data[a], data[b]], eps=eps)
    got_a = ta.evaluate(jacobian(y, a), data)
    got_b = ta.evaluate(jacobian(y, b), data)
    np.testing.assert_allclose(got_a, want_a, atol=tol, rtol=tol)
    np.testing.assert_allclose(got_b, want_b, atol=tol, rtol=tol)
    # forward mode through the same rules
    va = ta.placeholder((5,), F, name="VA")
    vb = ta.placeholder((5,), F, name="VB")
    dirs = {va: rng.uniform(-1, 1, 5), vb: rng.uniform(-1, 1, 5)}
    got = ta.evaluate(jvp(y, [a, b], [va, vb]), {**data, **dirs})
    np.testing.assert_allclose(got, want_a @ dirs[va] + want_b @ dirs[vb], atol=tol, rtol=tol)


def test_tangent_has_the_dtype_of_its_node():
    a = ta.placeholder((3,), "float32", name="A")
    b = ta.placeholder((3,), F, name="B")
    body = ta.cast(F, ta.exp(a[0]) * 2.0) * b[1] + ta.cast(F, ta.sqrt(ta.abs(a[2]) + 1.0))
    one = ta.const(1.0, "float32")
    for node in walk(body):
        if node.dtype in ("float32", "float64"):
            d = tangent(node, lambda n: one if n.op is Op.READ and n.arg == a else ZERO)
            assert d is ZERO or d.dtype == node.dtype, node


def test_symbolic_zero_never_multiplies_by_zero():
    a = ta.placeholder((4,), F, name="A")
    b = ta.placeholder((4,), F, name="B")
    y = ta.compute((4,), lambda i: a[i] * b[i] + ta.exp(b[i]) * ta.sin(b[i]) - b[i] / (a[i] * a[i] + 1.0),
                   name="Y")
    j = jacobian(y, a)
    for node in walk(j.op.body[0]):
        if node.op is Op.MUL:
            assert not any(s.op is Op.CONST and s.arg == 0 for s in node.src), node
    # a body that does not read the site has the symbolic zero as its partial
    site = a[0]
    assert partial_by_read(ta.exp(b[1]) * b[2], site) is ZERO
    assert partial_by_read(ta.select(b[1] < site, b[1], b[2]), site) is ZERO


def test_subgradients_at_ties_and_kinks():
    a = ta.placeholder((2,), F, name="A")
    # |x| at 0: 0 (what central differences give); max/min at a tie: half to each operand
    # (torch.maximum / torch.minimum)
    y = ta.compute((2,), lambda i: ta.abs(a[i] - a[i]) + ta.maximum(a[i], a[1 - i])
                   + ta.minimum(a[i], a[1 - i]), name="Y")
    got = ta.evaluate(jacobian(y, a), {a: np.array([0.5, 0.5])})
    # max gives 1/2 to a[i] and 1/2 to a[1-i], and min the same: every entry is 1
    np.testing.assert_array_equal(got, [[1.0, 1.0], [1.0, 1.0]])


def test_integer_subexpressions_have_zero_derivative():
    a = ta.placeholder((3,), F, name="A")
    y = ta.compute((3,), lambda i: ta.cast(F, ta.cast("int32", a[i] * 10.0)) + ta.cast(F, i * 2), name="Y")
    j = jacobian(y, a)
    assert j.op.body[0].op is Op.CONST and j.op.body[0].arg == 0
