"""``LoweredFunc.work`` is exact: it equals counts that do not use the work counter.

Two oracles:

* **Running the loop program.**  :func:`executed_work` interprets the lowered program literally
  -- every loop iterates with Python ints, every affine ``if`` is evaluated, a test reading data
  is taken (the worst case) -- and collects the distinct
  executions of innermost loop bodies that run a counted statement (a body execution is named by
  its enclosing loops and their iteration values; several counted statements in one body
  execution, e.g. the stores of a multi-output op, are one execution).  Accumulator
  initialisation, final stores and fused epilogues are bookkeeping, not work.
* **Enumerating the domain.**  For hand-made and random non-rectangular domains (triangles,
  strides, modulo conditions, min/max bounds, reduction ``where`` conditions), the number of
  points where the condition holds, counted by ``ta.evaluate`` on a 0/1 tensor of the condition
  over the whole box, or by a Python comprehension written in the test.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import random_program
from tensorad.codegen.program import Assign, If, Loop, Nest, Store, owner_of

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import fold

SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# ---- oracle 1: run the loop program ------------------------------------------------------------

_INT_RULES = {
    Op.CONST: lambda n: n.arg,
    Op.ADD: lambda n, a, b: a + b,
    Op.SUB: lambda n, a, b: a - b,
    Op.MUL: lambda n, a, b: a * b,
    Op.NEG: lambda n, a: -a,
    Op.FLOORDIV: lambda n, a, b: a // b,  # Python's // and % are floor division and modulo
    Op.MOD: lambda n, a, b: a % b,
    Op.MAXIMUM: lambda n, a, b: max(a, b),
    Op.MINIMUM: lambda n, a, b: min(a, b),
    Op.LT: lambda n, a, b: a < b,
    Op.LE: lambda n, a, b: a <= b,
    Op.GT: lambda n, a, b: a > b,
    Op.GE: lambda n, a, b: a >= b,
    Op.EQ: lambda n, a, b: a == b,
    Op.NE: lambda n, a, b: a != b,
    Op.AND: lambda n, a, b: a and b,
    Op.OR: lambda n, a, b: a or b,
    Op.NOT: lambda n, a: not a,
    Op.SELECT: lambda n, c, a, b: a if c else b,
    Op.CAST: lambda n, a: a,
}


def _int(e, env: dict) -> int:
    rules = dict(_INT_RULES)
    rules[Op.VAR] = lambda n: env[n]
    return fold(e, rules)


def _run(stmts: tuple, env: dict, path: tuple, seen: set) -> None:
    for s in stmts:
        if isinstance(s, Loop):
            for v in range(_int(s.lo, env), _int(s.hi, env), s.step):
                _run(s.body, {**env, s.var: v}, path + ((id(s), v),), seen)
        elif isinstance(s, If) and s.affine:
            _run(s.then if _int(s.cond, env) else s.orelse, env, path, seen)
        elif isinstance(s, If):  # a test reading data: taken, the worst case (its larger branch)
            runs: tuple = (set(), set())
            _run(s.then, env, path, runs[0])
            _run(s.orelse, env, path, runs[1])
            seen |= max(runs, key=len)
        elif isinstance(s, (Store, Assign)):
            if s.counted:  # (a fused nest: each member op's body execution is its own)
                seen.add((path, owner_of(s)))
        else:
            raise TypeError(s)


def executed_work(lowered) -> list[int]:
    """Per nest: the distinct innermost-body executions that run a counted statement (per
    member op of a fused nest)."""
    out = []
    for step in lowered.program.steps:
        if isinstance(step, Nest):
            seen: set = set()
            _run(step.body, {}, (), seen)
            out.append(len(seen))
    return out


def _check_against_execution(lowered) -> None:
    per_nest = executed_work(lowered)
    nests = [s for s in lowered.program.steps if isinstance(s, Nest)]
    assert [n.work for n in nests] == per_nest, str(lowered)
    assert lowered.work == sum(per_nest)


@settings(max_examples=150, **SETTINGS)
@given(random_program(dtype="float64", max_computes=3))
def test_random_programs_work_equals_executed_bodies(program):
    _check_against_execution(ta.lower(program.outputs, program.placeholders))


@settings(max_examples=40, **SETTINGS)
@given(random_program(dtype="float32", max_computes=2))
def test_random_gradient_programs_work_equals_executed_bodies(program):
    y = program.output
    h = ta.placeholder(y.shape, "float32", name="H")
    grads = ta.JacobianRecursive(y, list(program.placeholders), h)
    _check_against_execution(ta.lower(list(grads), list(program.placeholders) + [h]))


# ---- oracle 2: enumerate the domain ------------------------------------------------------------

X = ta.placeholder((6,), "float32", "X")
A = ta.placeholder((9, 9), "float32", "A")


def _multi_output_sub_domain():
    Y0, Y1 = ta.compute((9,), lambda i: (ta.select(i < 3, X[ta.minimum(i, 5)] * 2.0, 0.0),
                                         X[ta.minimum(i, 5)]), name="Y")
    return [Y0, Y1], [X]


def _min_index():
    return [ta.compute((9,), lambda i: X[ta.minimum(i, 5)] * 2.0, name="Y")], [X]


def _max_index_select():
    return [ta.compute((9,), lambda i: ta.select(i >= 2, X[ta.maximum(i - 3, 0)], 0.0), name="Y")], [X]


def _triangle():
    k = ta.reduce_axis((0, 9), "k")
    return [ta.compute((9,), lambda i: ta.sum(A[i, k], k, where=k <= i), name="T")], [A]


def _strided():
    return [ta.compute((9, 9), lambda i, j: ta.select(j % 3 == 1, A[i, j], 0.0), name="S")], [A]


def _modulo_reduction():
    k = ta.reduce_axis((0, 9), "k")
    return [ta.compute((9,), lambda i: ta.sum(A[i, k], k, where=(i + k) % 4 == 1), name="M")], [A]


def _min_max_window():
    k = ta.reduce_axis((0, 9), "k")
    return [ta.compute((9,), lambda i: ta.sum(X[ta.minimum(k, 5)], k, where=(k <= ta.minimum(i, 5))
                                              & (k >= ta.maximum(i - 1, 0))), name="W")], [X]


def _max_reduction_where():
    k = ta.reduce_axis((0, 9), "k")
    return [ta.compute((9, 9), lambda i, j: ta.max(A[k, j], k, where=(k >= i) & (k <= j)), name="R")], [A]


def _two_outputs_reduction_and_gradient():
    Y = ta.compute((9,), lambda i: ta.if_then_else(i < 6, X[ta.minimum(i, 5)], 0.0) * 3.0, name="Y")
    H = ta.placeholder((9,), "float32", "H")
    (g,) = ta.JacobianRecursive(Y, [X], H)
    return [g], [X, H]


HAND = {
    # name: (program, points counted by enumeration in plain Python)
    "min_index": (_min_index, 9),
    "multi_output_sub_domain": (_multi_output_sub_domain, 9),
    "max_index_select": (_max_index_select, sum(1 for i in range(9) if i >= 2)),
    "triangle": (_triangle, sum(1 for i in range(9) for k in range(9) if k <= i)),
    "strided": (_strided, sum(1 for i in range(9) for j in range(9) if j % 3 == 1)),
    "modulo_reduction": (_modulo_reduction, sum(1 for i in range(9) for k in range(9) if (i + k) % 4 == 1)),
    "min_max_window": (_min_max_window,
                       sum(1 for i in range(9) for k in range(9) if max(i - 1, 0) <= k <= min(i, 5))),
    "max_reduction_where": (_max_reduction_where,
                            sum(1 for i in range(9) for j in range(9) for k in range(9) if i <= k <= j)),
}


@pytest.mark.parametrize("name", sorted(HAND))
def test_hand_made_domains(name):
    make, expected = HAND[name]
    outputs, inputs = make()
    # plain loops over each domain (a running max would scan ``max_reduction_where``: test_scan.py)
    lowered = ta.lower(outputs, inputs, choices={f"{t.name}#0": "loops" for t in outputs})
    assert lowered.work == expected, str(lowered)
    _check_against_execution(lowered)


def test_gradient_of_clamped_read():
    outputs, inputs = _two_outputs_reduction_and_gradient()
    lowered = ta.lower(outputs, inputs)
    _check_against_execution(lowered)
    assert lowered.work <= 9


# random affine conditions (with floor division, modulo, min and max) over (i, j) and a reduction k
N_I, N_J, N_K = 5, 4, 6


_ATOM = st.tuples(st.sampled_from(["le", "mod", "div", "min", "max", "sum", "ne"]),
                  st.sampled_from("ijk"), st.sampled_from("ijk"), st.integers(-2, 3),
                  st.integers(2, 3), st.integers(0, 2))


def _atom(spec, env):
    kind, v, w, c, m, r = spec
    x, y = env[v], env[w]
    return {
        "le": lambda: x <= y + c,
        "mod": lambda: (x + y + c) % m == r % m,
        "div": lambda: (x + c) // 2 <= y,
        "min": lambda: x <= ta.minimum(y + c, 3),
        "max": lambda: x >= ta.maximum(y - c, 1),
        "sum": lambda: x + y >= c + 2,
        "ne": lambda: x != y + c,
    }[kind]()


def index_condition():
    """A conjunction of one to three random quasi-affine conditions on ``i, j, k`` (floor
    division, modulo, min, max), as a function of the three index variables."""
    return st.lists(_ATOM, min_size=1, max_size=3).map(
        lambda specs: lambda i, j, k: _conj([_atom(sp, {"i": i, "j": j, "k": k}) for sp in specs]))


def _conj(cs):
    out = cs[0]
    for c in cs[1:]:
        out = out & c
    return out


def _points(cond) -> int:
    """Points of the box where ``cond`` holds, by ta.evaluate of a 0/1 tensor."""
    ind = ta.compute((N_I, N_J, N_K), lambda i, j, k: ta.select(cond(i, j, k), 1.0, 0.0), name="ind")
    return int(round(float(np.sum(ta.evaluate([ind], {})[0]))))


@settings(max_examples=120, **SETTINGS)
@given(index_condition(), st.sampled_from(["sum", "max"]))
def test_random_reduction_domains(cond, reducer):
    B = ta.placeholder((N_I, N_J, N_K), "float32", "B")
    k = ta.reduce_axis((0, N_K), "k")
    red = getattr(ta, reducer)
    R = ta.compute((N_I, N_J), lambda i, j: red(B[i, j, k], k, where=cond(i, j, k)), name="R")
    lowered = ta.lower([R], [B])
    assert lowered.work == _points(cond), str(lowered)
    _check_against_execution(lowered)


@settings(max_examples=120, **SETTINGS)
@given(index_condition())
def test_random_elementwise_domains(cond):
    B = ta.placeholder((N_I, N_J, N_K), "float32", "B")
    E = ta.compute((N_I, N_J, N_K), lambda i, j, k: ta.select(cond(i, j, k), B[i, j, k] * 2.0, 0.0), name="E")
    lowered = ta.lower([E], [B])
    assert lowered.work == _points(cond), str(lowered)
    _check_against_execution(lowered)


def test_piecewise_bounds_are_walked_once_per_loop_not_per_point(monkeypatch):
    # compile time: the triangular bounds range(i + 1, min(n, 2 i)) were folded afresh at every
    # evaluation, about 8 walks per piece per frontier point (0.3 CPU-s of a conv gradient's
    # lowering); now each bound is walked once per loop and evaluated as a closure
    work_module = __import__("sys").modules["tensorad.codegen.loops.work"]
    walks = {"n": 0}
    real = work_module.fold

    def counting(*args, **kwargs):
        walks["n"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(work_module, "fold", counting)
    X = ta.placeholder((40, 64), "float64", name="X")
    k = ta.reduce_axis((0, 64), name="k")
    Y = ta.compute((40, 64), lambda j, i: ta.sum(X[j, k], axis=k, where=(k > i) & (k < 2 * i)), name="Y")
    low = ta.lower([Y], [X])
    want = sum(max(0, min(64, 2 * i) - (i + 1)) for i in range(64)) * 40
    assert low.work == want
    assert 0 < walks["n"] <= 16, walks


def test_piecewise_bounds_that_are_not_integer_arithmetic_expand():
    # a bound with a comparison (select(v >= 3, v, 2 v)) is no piecewise-affine form: the
    # counter expands it; compiling the bounds up front raised MissingRuleError instead
    # (found by the torch bridge's gradgradcheck of reshape)
    from tensorad.codegen.loops.work import count_work

    from tensorad.ir import expr as E

    v, t, o = E.var("v"), E.var("t"), E.var("o")
    zero = E.const(0, v.dtype)
    hi = ta.select(v >= 3, v, v * 2)
    inner = Loop(t, zero, hi, (Assign((), (), counted=True),))
    outer = Loop(v, zero, E.const(8, v.dtype), (inner,))
    body = (Loop(o, zero, E.const(5, v.dtype), (outer,)),)
    assert count_work(body) == 5 * sum(x if x >= 3 else 2 * x for x in range(8))


def test_loops_under_a_data_test_count_as_taken():
    """A scatter hoists a test that reads data out of its inner loop (``if M[i] > 0: for j:
    dE[idx[i], j] += H[i, j]``).  The work counted such a test as one execution and the loop it
    guards as nothing, so a scatter under one looked nearly free (6 instead of 30); it counts as
    taken, the worst case: every row's 5 columns."""
    from tensorad.codegen.program import walk_stmts

    E = ta.placeholder((7, 5), "float64", name="E")
    M = ta.placeholder((6,), "float64", name="M")
    idx = ta.placeholder((6,), "int32", name="idx")
    Y = ta.compute((6, 5), lambda i, j: ta.select(M[i] > 0, E.take(idx[i], j, mode="clip"), 0.0), name="Y")
    H = ta.placeholder((6, 5), "float64", name="H")
    low = ta.lower(list(ta.JacobianRecursive(Y, [E], H)), [E, M, idx, H])
    nest, = [s for s in low.program.steps if isinstance(s, Nest)]
    assert any(isinstance(s, If) and not s.affine and any(isinstance(x, Loop) for x in s.then)
               for s in walk_stmts(nest.body)), str(low)  # (the test is hoisted over a loop)
    assert low.work == 6 * 5
    _check_against_execution(low)
