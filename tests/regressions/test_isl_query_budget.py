"""The optimizer's isl queries that can run for minutes get a budget of isl's operations
(:data:`tensorad.poly.domain.QUERY_OPERATIONS`): past it, a reduction variable is not deskewed and a
condition not gisted, both sound.  The gradient of a sum over ``k`` that reads ``X`` through two
modulos, under a ``where=`` of two more, asks isl for a lexicographic minimum and gists that run for
minutes without it (at these sizes, over 45 CPU seconds; some 6 with it).  The gradient is computed
in a child process with a limit of 30 CPU seconds, so a regression fails instead of hanging the
suite, and checked against the scatter written here in NumPy (``X``'s last two elements are read by
no point: their gradient is zero)."""

from __future__ import annotations

import os

import numpy as np
import pytest

SCRIPT = r"""
import numpy as np, tensorad as ta
X = ta.placeholder((33,), "float64", name="X")
k = ta.reduce_axis((0, 15), name="k")
Y = ta.compute((20,), lambda i: ta.sum(X[(i * 5 + k * 7) % 11 * 3], axis=k,
               where=((i + k) % 4 != 1) & ((i * 3 + k) % 7 < 5)), name="Y")
H = ta.placeholder((20,), "float64", name="H")
(dX,) = ta.JacobianRecursive(Y, [X], H)
h = np.random.default_rng(0).standard_normal(20)
np.save("{out}b", ta.build([dX], [H])(h))
np.save("{out}e", ta.evaluate(dX, {{H: h}}))
"""


@pytest.mark.slow
def test_a_gradient_through_four_modulos_is_made_in_seconds(tmp_path, python_child):
    out = str(tmp_path / "g")
    done = python_child(SCRIPT.format(out=out), 30, env={**os.environ, "TENSORAD_NO_DISK_CACHE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    h = np.random.default_rng(0).standard_normal(20)
    want = np.zeros(33)
    for i in range(20):
        for k in range(15):
            if (i + k) % 4 != 1 and (i * 3 + k) % 7 < 5:
                want[(i * 5 + k * 7) % 11 * 3] += h[i]
    for suffix in ("b", "e"):
        np.testing.assert_allclose(np.load(out + suffix + ".npy"), want, rtol=1e-12, atol=1e-12)
