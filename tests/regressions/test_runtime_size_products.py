"""A product of sizes that a generic or staged kernel reads at run time is exact at any count of rows, as
the constant a static program folds is.  The count of rows was an ``int32`` value there: batch norm's
``1 / (n * H * W)`` wrapped past 684,784 rows of 56 x 56 (a mean of ``inf`` or a wrong sign).  The
checks use a large factor and a few rows (no huge arrays): the kernel's value against the static
kernel's and NumPy's, and the arithmetic of the bound program in ``int64``."""

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk

BIG = 1 << 30  # (times 2 rows or more: past int32)


def _scaled(n):
    X = ta.placeholder((n, 4), name="X")
    inv = ta.const(1.0, "float64") / ta.cast("float64", n * BIG)
    return X, ta.compute((n, 4), lambda i, j: X[i, j] * ta.cast("float32", inv), name="Y")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_product_of_the_count_and_a_large_factor_does_not_wrap(threads):
    X, Y = _scaled(ta.size_var("n"))
    kernel = ta.build(Y, [X], num_threads=threads)
    assert kernel.generic
    for size in (1, 2, 3, 7, 17):
        x = np.random.default_rng(size).standard_normal((size, 4)).astype(np.float32)
        want = (x.astype(np.float64) / (size * BIG)).astype(np.float32)
        np.testing.assert_allclose(kernel(x), want, rtol=1e-6)
        Xs, Ys = _scaled(size)
        np.testing.assert_array_equal(kernel(x), ta.build(Ys, [Xs])(x))


def test_the_count_in_a_bound_body_is_int64_arithmetic():
    """The stage's body reads the count of rows as ``int64`` and multiplies it in ``int64``; no cast
    narrows it to ``int32``."""
    X, Y = _scaled(ta.size_var("n"))
    count = ta.placeholder((1,), "int64", name="n")
    (bound,) = ta.symbolic.bind_all([Y], {"n": 5}, {"n": count(0)}).get(Y, Y).op.body
    products = [e for e in walk(bound) if e.op is Op.MUL and not e.dtype.startswith("float")]
    assert products and all(e.dtype == "int64" for e in products)
    assert not any(e.op is Op.CAST and e.dtype == "int32" for e in walk(bound))
