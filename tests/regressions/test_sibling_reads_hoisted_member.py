"""A reduction fused beside a log-softmax read elements not yet computed.

``log_softmax`` over the rows of ``X`` is planned by the hoist strategy (``log`` of the
column sums computed once per column), which rewrites its op; the rewritten op writes the
original's tensor (an alias).  A max over ``r`` of ``T[r, (j + 1) % 2] + X[i, j]`` reads ``X``
too, so nest fusion took it for a *sibling* of the log-softmax -- a reduction that reads no
member -- because its reads of ``T`` name the original op, not the member: both ran in one
loop over ``(i, j)``, and the max read rows of ``T`` later iterations compute.  The first call
read an uninitialized temporary (later calls read the previous call's values, the kernel's
workspace).  Membership now follows the aliases.  Checked against NumPy on the first call.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

F = "float64"


@pytest.mark.parametrize("threads", [1, 2])
def test_a_reduction_reading_a_hoisted_log_softmax_elsewhere_is_not_its_sibling(threads):
    X = ta.placeholder((4, 2), F, name="X")
    T = ta.topi.nn.log_softmax(X, axis=-2)
    r = ta.reduce_axis((0, 4), name="r")
    Y = ta.compute((4, 2), lambda i, j: ta.max(T[r, (j + 1) % 2] + X[i, j], axis=r), name="Y")
    x = np.array([[0.0, 0.0], [1.5760521206860707, 0.5], [-2.0, 3.0], [0.25, -1.0]])
    e = np.exp(x - x.max(axis=0))
    t = np.log(e / e.sum(axis=0))
    want = np.array([[t[:, (j + 1) % 2].max() + x[i, j] for j in range(2)] for i in range(4)])
    kernel = ta.build([T, Y], [X], num_threads=threads)
    got_t, got_y = kernel(x)  # the first call: no earlier call's temporaries to read
    np.testing.assert_allclose(got_t, t, rtol=1e-12)
    np.testing.assert_allclose(got_y, want, rtol=1e-12)
