"""Building a strided sum with a loop-invariant factor crashed.

``sum over r in {0, 2} of exp(min(x[j], 3)) * c[3r + i, j + 3]``: one code-generation plan
unrolls the strided sum into a new op (storing into the sum's buffer: an alias), a nested plan
hoists ``exp(...)`` out of that op into a third op, aliased to the second.  The aliases were not
followed to their end, so the last op had no buffer (nothing seemed to read it) and lowering
raised ``IndexError`` (``max() arg is an empty sequence`` in the seed's jvp).  Checked against
NumPy.
"""

from __future__ import annotations

import numpy as np

import tensorad as ta

F = "float64"


def test_a_hoisted_factor_of_an_unrolled_strided_sum_stores_into_the_sum(rng):
    x = ta.placeholder((3,), F, name="x")
    a = ta.placeholder((13, 6), F, name="a")
    c = ta.compute((13, 6), lambda i, j: a[i, j] * 2.0, name="c")
    r = ta.reduce_axis((0, 3), name="r")
    y = ta.compute((3, 3), lambda i, j: ta.sum(ta.exp(ta.minimum(x[j], 3.0)) * c[r * 3 + i, j + 3], axis=[r],
                                               where=r % 2 == 0), name="y")
    z = ta.compute((3, 3), lambda i, j: y[i, j] + x[j], name="z")
    xv, av = rng.standard_normal(3), rng.standard_normal((13, 6))
    want = np.array([[sum(np.exp(min(xv[j], 3.0)) * 2.0 * av[3 * q + i, j + 3] for q in (0, 2)) + xv[j]
                      for j in range(3)] for i in range(3)])
    for threads in (1, 2):
        np.testing.assert_allclose(ta.build([z], [x, a], num_threads=threads)(xv, av), want, rtol=1e-12)
