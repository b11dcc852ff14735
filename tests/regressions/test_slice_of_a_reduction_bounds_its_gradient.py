"""A reduction read at a few points through a winner, ``Y = min_r tanh(T[r, (2r + 1) % J])`` with
``T[b, j] = min_k A[b, k, j]``: the head of ``T`` is nonzero only where some ``r`` reads it,
``b == w && j == (2w + 1) % J`` for ``w`` the winner of ``Y`` (data).  The guard of ``T``'s gradient
keeps what that conjunction says of ``(b, j)`` with ``w`` projected out by isl, ``b < R``, not ``True``
(each conjunct reads data, and each was weakened to ``True`` on its own), so that ``T``'s winner and
the routing to ``A`` run over the rows ``Y`` reads, not over all of ``A``.

Oracles: float64 central differences of the formula in NumPy; ``ta.evaluate``."""

import numpy as np
import pytest

import tensorad as ta

B, K, J, R = 6, 8, 7, 4


def _program(kind):
    A = ta.placeholder((B, K, J), "float64", "A")
    k, r = ta.reduce_axis((0, K), "k"), ta.reduce_axis((0, R), "r")
    T = ta.compute((B, J), lambda b, j: getattr(ta, kind)(A[b, k, j], axis=k), name="T")
    return A, ta.compute((), lambda: getattr(ta, kind)(ta.tanh(T[r, (2 * r + 1) % J]), axis=r), name="Y")


def _loss(a, h, kind):
    reduce = {"min": np.min, "max": np.max}[kind]
    t = reduce(a, axis=1)
    return h * reduce([np.tanh(t[r, (2 * r + 1) % J]) for r in range(R)])


@pytest.mark.parametrize("kind", ["min", "max"])
def test_gradient_of_a_slice_of_a_min_equals_central_differences(kind):
    A, Y = _program(kind)
    H = ta.placeholder((), "float64", "H")
    (dA,) = ta.JacobianRecursive(Y, [A], H)
    rng = np.random.default_rng(5)
    a = rng.permutation(np.linspace(-1.0, 1.0, B * K * J)).reshape(B, K, J)  # (no ties)
    h = np.float64(0.7)
    eps = 1e-6
    want = np.array([(_loss(a + e, h, kind) - _loss(a - e, h, kind)) / (2 * eps)
                     for e in np.eye(B * K * J).reshape(-1, B, K, J) * eps]).reshape(B, K, J)
    np.testing.assert_allclose(ta.build([dA], [A, H])(a, h), want, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(ta.evaluate(dA, {A: a, H: h}), want, rtol=1e-6, atol=1e-8)


def test_gradient_of_a_slice_of_a_min_runs_over_the_rows_read():
    """Work by hand, on a pinned target: ``Y`` reads ``T`` in the box of rows ``b < R`` and columns
    ``j < J - 1``, where ``T``'s minimum and its tie count take ``K`` terms each (``2 R (J - 1) K``), and
    four passes over that box at most (the destination of each minimum, ``Y``'s terms, ``T``'s head and
    the routing to ``A``): ``2 R (J - 1) K + 4 R (J - 1)``, where a guard weakened to ``True`` routes
    over all ``B`` rows of ``A``."""
    A, Y = _program("min")
    H = ta.placeholder((), "float64", "H")
    (dA,) = ta.JacobianRecursive(Y, [A], H)
    assert ta.lower([dA], [A, H], target="llvm -mcpu=haswell").work <= 2 * R * (J - 1) * K + 4 * R * (J - 1)
