"""A micro-kernel tile of two rows (``tile=(2, ...)``) packs A in register transposes of two rows of a
whole vector each: the transpose interleaved them in groups of a 16-byte lane (four floats), then looked
for the vector holding the next column, which no vector held -- ``KeyError: 1`` out of ``ta.build`` for
a float32 product of several rows, on AVX2 and AVX-512 alike.  Two rows of floats now interleave pairs,
as two rows of doubles do."""

import numpy as np
import pytest

import tensorad as ta


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
def test_a_two_row_tile_packs_and_multiplies(target):
    rng = np.random.default_rng(3)
    for m, n, k in [(5, 3, 19), (2, 17, 40)]:
        A, B = ta.placeholder((m, k), "float32", "A"), ta.placeholder((n, k), "float32", "B")
        r = ta.reduce_axis((0, k), "r")
        C = ta.compute((m, n), lambda i, j, A=A, B=B, r=r: ta.sum(A[i, r] * B[j, r], r), name="C")
        kernel = ta.build([C], [A, B], microkernel=True, tile=(2, None, None, None), num_threads=1,
                          target=target)
        a, b = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((n, k)).astype("float32")
        np.testing.assert_allclose(kernel(a, b), a.astype(np.float64) @ b.T.astype(np.float64),
                                   rtol=1e-5, atol=1e-5)
