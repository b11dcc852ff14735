"""isl's AST builder gets a budget of operations on domains with divisions (codegen/islast).

A hang with default options: the gradient of ``X[(3 i0 + i1) % 7,
(3 i1 + i2) % 7, 0]`` under an ``if_then_else`` is a scatter whose statement domain, once the
solved axes are substituted, has four nested floors and a ``mod 21`` over five variables.
isl's AST builder did not finish in an hour on it.  Now a map with more than
``islast.AST_DIVISIONS`` divisions in a piece, or one that spends ``islast.AST_OPERATIONS``
of isl's operations (its own count, not a clock) in a context of its own, has its loops built
over the domain's division-free hull with the exact test inside (the same points,
:mod:`tensorad.codegen.loops.ast_check`).  The builds run in a child process with a limit of
CPU seconds, so a regression fails instead of hanging the suite; the values are checked against the
scatter written here in NumPy and against ``ta.evaluate``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SCRIPT = r"""
import numpy as np, tensorad as ta
a, b, m, n = {a}, {b}, {m}, {n}
X = ta.placeholder((m, m, 1), "float64", name="X")
Y = ta.compute((3, 17, n), lambda i0, i1, i2: ta.if_then_else(
    i0 >= 2, ta.const(0.5, "float64"), X[(i0 * a + i1) % m, (i1 * b + i2) % m, (0 - i1) % 1]), name="Y")
H = ta.placeholder((3, 17, n), "float64", name="H")
(dX,) = ta.JacobianRecursive(Y, [X], H)
h = np.random.default_rng(0).standard_normal((3, 17, n))
for opts in ({{}}, {{"checked": True}}):
    got = ta.build([dX], [H], **opts)(h)
    np.save("{out}" + str(len(opts)), got)
np.save("{out}e", ta.evaluate(dX, {{H: h}}))
"""


def scatter(a: int, b: int, m: int, n: int) -> np.ndarray:
    h = np.random.default_rng(0).standard_normal((3, 17, n))
    want = np.zeros((m, m, 1))
    for i0 in range(2):  # i0 >= 2 reads no X
        for i1 in range(17):
            for i2 in range(n):
                want[(i0 * a + i1) % m, (i1 * b + i2) % m, 0] += h[i0, i1, i2]
    return want


def check(tmp_path, python_child, a: int, b: int, m: int, n: int) -> None:
    out = str(tmp_path / "g")
    code = SCRIPT.format(a=a, b=b, m=m, n=n, out=out)
    done = python_child(code, 60)
    assert done.returncode == 0, done.stderr[-3000:]
    want = scatter(a, b, m, n)
    for suffix in ("0", "1", "e"):
        np.testing.assert_allclose(np.load(out + suffix + ".npy"), want, rtol=1e-12, atol=1e-12)


def test_a_scatter_through_modulos_of_three_and_seven(tmp_path, python_child):
    check(tmp_path, python_child, 3, 3, 7, 16)


@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                HealthCheck.function_scoped_fixture])
@given(a=st.integers(1, 6), b=st.integers(1, 6), m=st.integers(2, 9), n=st.integers(1, 17))
def test_random_scatters_through_two_modulos(tmp_path, python_child, a, b, m, n):
    check(tmp_path, python_child, a, b, m, n)
