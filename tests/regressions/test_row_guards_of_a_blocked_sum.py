"""A generic kernel's block whose float sum over its rows is blocked (a long sum adds its terms in blocks,
then a remainder loop) reuses a loop variable at two depths: the rows' index ``(kb * 5 + k)`` is guarded by
the count of rows in the loop over ``k`` inside the one over ``kb``, and the remainder's loop over ``k``,
outside any ``kb``, takes no such guard.  The guard was placed by the variable's depth anywhere in the
nest, once on a loop over ``kb`` whose body does not bind ``k``, and building the kernel raised a
``KeyError`` (a batch norm over a symbolic batch of 28 x 28 images)."""

import numpy as np

import tensorad as ta


def test_mean_over_a_batch_of_images_builds_and_runs_every_size():
    n = ta.size_var("n")
    X = ta.placeholder((n, 1, 28, 28), name="X")
    k0, k1, k2 = ta.reduce_axis((0, n), "k0"), ta.reduce_axis((0, 28), "k1"), ta.reduce_axis((0, 28), "k2")
    S = ta.compute((1,), lambda c: ta.sum(X[k0, c, k1, k2], axis=[k0, k1, k2]), name="S")
    Y = ta.compute((n, 1, 28, 28), lambda i, c, h, w: X[i, c, h, w] - S[c] / (n * 784.0), name="Y")
    kernel = ta.build(Y, [X])
    assert kernel.generic
    for size in (1, 7, 65, 300, 1000):  # (one row, one block, stages over blocks of 8, 64 and 256)
        x = np.random.default_rng(size).standard_normal((size, 1, 28, 28)).astype(np.float32)
        want = x.astype(np.float64) - x.astype(np.float64).mean()
        np.testing.assert_allclose(kernel(x), want, rtol=1e-4, atol=1e-4)
