"""A max/min gradient finds the points tied with the winner by comparing their source with the
winner's value, so both must see the same bits (tests/regressions/test_tie_test_asymmetry.py).
The ``split`` check (``ta.function``'s forward and backward built with different options)
broke it twice over, with a source that only READS a tensor:

* the tensor was elementwise, ``C[i] = S[i] * 2 + a``: the source ``C[...]`` looked exact (a
  read), but the optimizer inlines ``C`` into the winner and into the tie test, so each side
  computed ``x0 * x1 + z`` itself -- one FMA in the fast-math forward, two roundings in the
  backward: 1 of 4 ties found, a quarter of the gradient.  Now such a tensor is copied once
  (``C.tie``, ``Role.SAVED``, its own shape) and both sides read the copy;
* the tensor was a reduction the policy did not save: the backward summed it again with its
  own options.  Now a saved winner takes the tensors it reads with it (unless recomputing them
  is exact).

The inexact tensor may also be read through a gather whose index is
itself a copied tensor (``C[I[0]]``, ``I`` an integer cast of float arithmetic): copies
keyed by the read node miss it: the bottom-up rewrite has already replaced the inner read, so
the outer one never matches and ``C`` is not copied.

At ``x0 = x1 = 1 + 2^-27, z = -1`` a fused ``x0 * x1 + z`` and a rounded one differ by 2^-54.
Every point of the box ties (``z`` or the gathered index holds one value four times): the gradient
is the head's sum times the other factor, and a quarter of the head's sum for each ``z[k]`` (a
formula written here).
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.dtype import is_float
from tensorad.ir.rewrite import tensor_graph
from tensorad.ir.tensor import Role

A = 1 + 2.0**-27


def _through_elementwise(op):
    x = ta.placeholder((2,), "float64", name="x")
    z = ta.placeholder((4,), "float64", name="z")
    C = ta.compute((4,), lambda i: x[0] * x[1] + z[i], name="C")
    k = ta.reduce_axis((0, 4), name="k")
    return x, z, ta.compute((3,), lambda i: op(C[k], axis=[k]), name="Y")


def _through_reduction(op):
    x = ta.placeholder((2,), "float64", name="x")
    z = ta.placeholder((4,), "float64", name="z")
    r = ta.reduce_axis((0, 1), name="r")
    S = ta.compute((4,), lambda i: ta.sum(x[r] * x[1 - r] + z[i], axis=[r]), name="S")
    k = ta.reduce_axis((0, 4), name="k")
    return x, z, ta.compute((3,), lambda i: op(S[k], axis=[k]), name="Y")


def _through_gather(op):
    x = ta.placeholder((2,), "float64", name="x")
    z = ta.placeholder((1,), "float64", name="z")
    w = ta.placeholder((4,), "float64", name="w")
    C = ta.compute((3,), lambda i: x[0] * x[1] + z[0], name="C")
    index = ta.compute((4,), lambda i: ta.cast("int64", w[i] * 2.0), name="I")  # 1 at w = 0.5
    k = ta.reduce_axis((0, 4), name="k")
    Y = ta.compute((3,), lambda i: op(C.take(index[k], mode="clip"), axis=[k]), name="Y")
    return x, z, w, Y


def _winner_only(t):  # a user policy that saves the winner and would recompute the rest
    return t.name.endswith(".winner")


@pytest.mark.parametrize("program", [_through_elementwise, _through_reduction])
@pytest.mark.parametrize("op", [ta.max, ta.min])
@pytest.mark.parametrize("policy", ["default", "recompute_all", _winner_only])
def test_every_tie_counted_when_forward_and_backward_are_built_differently(program, op, policy):
    x, z, Y = program(op)
    xv, zv, h = np.array([A, A]), np.full(4, -1.0), np.array([1.0, 2.0, -0.5])
    fused = ta.function(Y, [x, z], policy=policy, fastmath=True, target="llvm -mcpu=haswell")
    strict = ta.function(Y, [x, z], policy=policy, fastmath=False, target="llvm -mcpu=x86-64")
    _, residuals = fused.forward(xv, zv)
    gx, gz = strict.backward(residuals, h)
    np.testing.assert_allclose(gx, h.sum() * xv[::-1], rtol=1e-15)
    np.testing.assert_allclose(gz, np.full(4, h.sum() / 4), rtol=1e-15)


@pytest.mark.parametrize("op", [ta.max, ta.min])
@pytest.mark.parametrize("fastmath", [True, False])
def test_every_tie_counted_through_a_gather_by_a_copied_index(op, fastmath):
    x, z, w, Y = _through_gather(op)
    xv, zv, wv, h = np.array([A, A]), np.array([-1.0]), np.full(4, 0.5), np.array([1.0, 2.0, -0.5])
    forward = ta.function(Y, [x, z, w], wrt=[x, z], fastmath=fastmath, target="llvm -mcpu=haswell")
    backward = ta.function(Y, [x, z, w], wrt=[x, z], fastmath=not fastmath, target="llvm -mcpu=haswell")
    _, residuals = forward.forward(xv, zv, wv)
    gx, gz = backward.backward(residuals, h)
    np.testing.assert_allclose(gx, h.sum() * xv[::-1], rtol=1e-15)
    np.testing.assert_allclose(gz, [h.sum()], rtol=1e-15)


def _saved_values(g):
    """The saved float tensors of ``g``'s program (the winners' destinations, saved by design, are
    integer offsets)."""
    return [t for t in tensor_graph([g]) if not t.is_placeholder and t.op.provenance.role is Role.SAVED
            and is_float(t.dtype)]


def test_an_inexact_elementwise_read_is_copied_at_its_own_shape():
    x, z, Y = _through_elementwise(ta.max)
    (g,) = ta.gradient(Y, [x])
    saved = _saved_values(g)
    assert [t.shape for t in saved] == [(4,)]  # C's shape, not the (3, 4) of outputs x window
    # an exact elementwise read (one rounding: a ReLU of a difference) is not copied
    X = ta.placeholder((4, 6), "float64", name="X")
    R = ta.compute((4, 6), lambda i, j: ta.maximum(X[i, j] - 1.0, 0.0), name="R")
    r = ta.reduce_axis((0, 2), name="r")
    P = ta.compute((4, 3), lambda i, j: ta.max(R[i, 2 * j + r], axis=[r]), name="P")
    (gp,) = ta.gradient(P, [X])
    assert not _saved_values(gp)


def test_a_saved_winner_takes_the_reduction_it_read_with_it():
    x, z, Y = _through_reduction(ta.max)
    f = ta.function(Y, [x, z], policy=_winner_only)
    names = {t.name for t in f.plan.saved}
    assert names == {"Y.winner", "S"}, names
