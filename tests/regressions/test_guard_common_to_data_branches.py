"""A gradient's affine guard is lifted through a choice on data, and a zero gradient is a fill.

Three gaps made a gradient do work over elements where it is zero:

* The nonzeroness of ``select(c, a, b)`` with ``c`` a test of data is ``c && nz(a) || !c && nz(b)``.
  A conjunct both branches share (``i == 14`` in the derivative of ``abs`` at one element read) sits
  inside that disjunction, and only the top-level conjuncts were taken as the body's guard: each
  element of the gradient was computed to find the one that is not zero.  The conjuncts every
  disjunct implies, at any depth (``(c && p) || (!c && p)`` implies ``p``), are lifted too.
* A gather index into an axis of extent 1 (``data_index(v, 1, clip)``, as the winner of a reduction
  over one point routes its head) is 0 in the ``clip`` and ``wrap`` modes; as an opaque value it kept
  an equation of data where an affine one (``i == 14``) decides the element.
* An output that is zero everywhere (the gradient of an input the output does not read) was written
  by a loop with one counted body per element instead of a fill.

Oracles: NumPy formulas of the gradients written here and float64 central differences.
"""

from __future__ import annotations

import numpy as np
import pytest
from tensorad.simplify import simplify_expr

import tensorad as ta
from tensorad.ir.expr import const, data_index, var

N = 17
PICK = 14  # the element (-3) % 17 the forward reads


def _one_element(reducer):
    """``Y = reducer over r in [0, 1) of (|X[(-3 - r) % 17]| + 0.5) ** 1.5``, and an input ``Z`` it
    does not read."""
    X = ta.placeholder((N,), "float64", name="X")
    Z = ta.placeholder((3, 5), "float64", name="Z")
    P = ta.topi.power(ta.topi.add(ta.topi.abs(X), 0.5), 1.5)
    r = ta.reduce_axis((0, 1), "r")
    Y = ta.compute((), lambda: reducer(P[(-3 - r) % N], axis=[r]), name="Y")
    return X, Z, Y[-1] if isinstance(Y, tuple) else Y


#: a (sum, max) pair: its max component routes the head through a winner over the one point
SUMMAX = ta.comm_reducer(lambda x, y: (x[0] + y[0], ta.maximum(x[1], y[1])),
                         lambda a, b: (ta.const(0, a), ta.min_value(b)), name="summax")


def _summax(value, axis):
    return SUMMAX((value, ta.abs(value) * 0.5), axis=axis)


def _forward(x: np.ndarray, scale: float) -> np.ndarray:
    return np.asarray(scale * (np.abs(x[PICK]) + 0.5) ** 1.5)


def _gradient(x: np.ndarray, h: float, scale: float) -> np.ndarray:
    dx = np.zeros_like(x)
    dx[PICK] = scale * h * 1.5 * (abs(x[PICK]) + 0.5) ** 0.5 * np.sign(x[PICK])
    return dx


@pytest.mark.parametrize("reducer", [ta.sum, ta.max, _summax], ids=["sum", "max", "summax"])
def test_one_element_gradient_work_and_values(reducer, numeric_grad):
    scale = 0.5 if reducer is _summax else 1.0
    X, Z, Y = _one_element(reducer)
    H = ta.placeholder((), "float64", name="H")
    dX, dZ = ta.JacobianRecursive(Y, [X, Z], H)
    # hand count: a sum's gradient is its one element (1); a max's or summax's computes that element's
    # |x|, power and tie value (3), its winner over the one point (1) and the gradient's element (1).
    # Z's gradient is a fill, no loop.
    hand = 1 if reducer is ta.sum else 5
    work = ta.lower([dX, dZ], [X, H], target="llvm -mcpu=skylake-avx512").work
    assert work <= hand, f"gradient work {work} > {hand}: the 17 elements of X and 15 zeros of Z"

    kernel = ta.build([dX, dZ], [X, H])
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N)
    for h in (0.7, -1.3):
        gx, gz = kernel(x, np.asarray(h))
        np.testing.assert_allclose(gx, _gradient(x, h, scale), rtol=1e-12, atol=0)
        np.testing.assert_array_equal(gz, np.zeros((3, 5)))
        (fd,) = numeric_grad(lambda a: _forward(a, scale), [x], head=np.asarray(h))
        np.testing.assert_allclose(gx, fd, rtol=1e-7, atol=1e-9)


def test_gather_into_one_point_is_zero():
    v = var("v", 0, 100)
    for mode in ("clip", "wrap"):
        assert simplify_expr(data_index(v, 1, mode)) is const(0, v.dtype)
    kept = data_index(v, 1, "raise")  # an index out of range is an error: not folded
    assert simplify_expr(kept) is kept
