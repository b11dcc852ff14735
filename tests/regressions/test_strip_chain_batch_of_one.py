"""A strip chain over a batch of one keeps its rows' last axis out of the shared prefix.

A max pool's gradient runs the max and the winner's destination as strips along each output row,
in one nest over the outer loops but the row's last axis.  A batch axis of extent 1 is in no
prefix; counting it as one made the prefix take the row's last axis too, so the strips became
one point each (no vector loop) and a batch of one ran about four times slower per image."""

import numpy as np
import pytest
from tensorad.codegen.program import Loop, Nest, walk_stmts

import tensorad as ta


def _max_pool_grad(n: int):
    X = ta.placeholder((n, 4, 56, 56), "float32", "X")
    Y = ta.topi.nn.pool(X, [3, 3], [2, 2], [1, 1, 1, 1], "max")
    H = ta.placeholder(Y.shape, "float32", "H")
    (g,) = ta.JacobianRecursive(ta.topi.sum(Y * H), [X])
    return X, H, Y, g


def _inner_extents(n: int) -> list[int]:
    """The ranges of the variables of the innermost loops of the max pool's fused nest."""
    X, H, _, g = _max_pool_grad(n)
    (nest,) = [s for s in ta.lower([g], [X, H], target="llvm -mcpu=haswell").program.steps
               if isinstance(s, Nest) and "fused over" in s.note]
    loops = [s for s in walk_stmts(nest.body) if isinstance(s, Loop)]
    inner = [lp for lp in loops if not any(isinstance(t, Loop) for t in walk_stmts(lp.body))]
    return sorted({lp.var.extent for lp in inner})


@pytest.mark.parametrize("n", [1, 2])
def test_the_strips_run_along_the_output_row_at_every_batch(n):
    assert _inner_extents(n) == [28]  # (the output rows' 28 points, not windows of one point)


@pytest.mark.slow
def test_a_batch_of_one_is_the_batch_of_two_first_image():
    X1, H1, _, g1 = _max_pool_grad(1)
    X2, H2, _, g2 = _max_pool_grad(2)
    rng = np.random.default_rng(3)
    x = rng.integers(-3, 3, (2, 4, 56, 56)).astype(np.float32)  # (ties)
    h = rng.uniform(-1, 1, (2, 4, 28, 28)).astype(np.float32)
    one = ta.build([g1], [X1, H1])(x[:1], h[:1])
    two = ta.build([g2], [X2, H2])(x, h)
    np.testing.assert_array_equal(one, two[:1])
    np.testing.assert_allclose(two, ta.evaluate(g2, {X2: x.astype(np.float64), H2: h.astype(np.float64)}),
                               rtol=1e-5, atol=1e-7)
