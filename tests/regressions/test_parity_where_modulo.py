"""A reduction under a `where` with a modulo, over output rows of another
residue class, crashed ``ta.build`` with isl's "expecting integer affine expression"
(``isl_pw_aff_min_val`` on a domain with divisions, in the parity strategy's tightening of
the reduction axes).  The range of an axis is now read from the image set."""

from __future__ import annotations

import numpy as np

import tensorad as ta


def test_max_under_a_modulo_where_builds_and_matches_numpy():
    x = ta.placeholder((3, 1), "float64", name="x")
    r0 = ta.reduce_axis((0, 4), name="r0")
    r1 = ta.reduce_axis((0, 3), name="r1")
    y = ta.compute((16, 1), lambda i, j: ta.max(x[(i + 3) % 3, 0 - i % 1], axis=[r0, r1],
                                                where=(2 * r0 - r1 + 2) % 5 == 0), name="y")
    xv = np.random.default_rng(0).uniform(-1, 1, (3, 1))
    # (r0, r1) = (0, 2) satisfies the condition, so every row reads one value of x
    want = xv[(np.arange(16) + 3) % 3, 0][:, None]
    np.testing.assert_array_equal(ta.build([y], [x])(xv), want)
    np.testing.assert_array_equal(ta.evaluate([y], {x: xv})[0], want)
