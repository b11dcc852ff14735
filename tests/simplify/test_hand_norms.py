"""Normalizations written by hand reach the gradient work of ``ta.topi``'s.

A group norm's statistics sum each group as ``X[i, g*cg + a, y, x]`` (or over ``q // cg == g``,
a where-condition), and its gradient's brackets sum the same points as the optimizer spells
them.  The forward sums are held in the op table in the brackets' canonical spelling, their
where-conditions solved and their unit axes dropped (:meth:`simplify.program._Pass.register_sum`,
read back as views: :meth:`simplify.cse.OpTable.read`), so that a bracket equal to a statistic
reads it instead of summing the group again, whatever the user named its variables.

Work is counted on a pinned target; values are checked against float64 central differences of
a NumPy group norm.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

TARGET = "llvm -mcpu=skylake-avx512"
F64 = "float64"
N, C, HH, WW = 2, 6, 4, 5
EPS = 1e-5


def _axes(extents, prefix):
    return [ta.reduce_axis((0, e), f"{prefix}{k}") for k, e in enumerate(extents)]


def _hand_group_norm(groups: int, spelling: str):
    """``Y = (X - mu) / sqrt(var + eps)`` per ``(n, group)``, the statistics' group read as
    ``g*cg + a`` (``digits``) or summed over every channel where ``q // cg == g`` (``where``)."""
    cg = C // groups
    X = ta.placeholder((N, C, HH, WW), F64, name="X")
    inv = 1.0 / (cg * HH * WW)

    def group_sum(term, prefix):
        if spelling == "digits":
            a = _axes((cg, HH, WW), prefix)
            return lambda i, g: ta.sum(term(i, g, g * cg + a[0], a[1], a[2]), a)
        q = _axes((C, HH, WW), prefix)
        return lambda i, g: ta.sum(term(i, g, q[0], q[1], q[2]), q, where=q[0] // cg == g)

    total = group_sum(lambda i, g, q, y, x: X[i, q, y, x], "a")
    mu = ta.compute((N, groups), lambda i, g: total(i, g) * inv, name="mu")
    sq = group_sum(lambda i, g, q, y, x: (X[i, q, y, x] - mu[i, g]) * (X[i, q, y, x] - mu[i, g]), "b")
    var = ta.compute((N, groups), lambda i, g: sq(i, g) * inv, name="var")
    Y = ta.compute(X.shape, lambda i, q, y, x: (X[i, q, y, x] - mu[i, q // cg])
                   / ta.sqrt(var[i, q // cg] + EPS), name="Y")
    return X, Y


def _hand_batch_norm():
    X = ta.placeholder((N, C, HH, WW), F64, name="X")
    inv = 1.0 / (N * HH * WW)
    a, b = _axes((N, HH, WW), "a"), _axes((N, HH, WW), "b")
    mu = ta.compute((C,), lambda q: ta.sum(X[a[0], q, a[1], a[2]], a) * inv, name="mu")
    centred = (lambda q: X[b[0], q, b[1], b[2]] - mu[q])
    var = ta.compute((C,), lambda q: ta.sum(centred(q) * centred(q), b) * inv, name="var")
    Y = ta.compute(X.shape, lambda i, q, y, x: (X[i, q, y, x] - mu[q]) / ta.sqrt(var[q] + EPS), name="Y")
    return X, Y


def _gradient(X, Y):
    H = ta.placeholder(Y.shape, F64, name="H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    return dX, H


def _work(X, Y) -> int:
    dX, H = _gradient(X, Y)
    return ta.lower([dX], [X, H], target=TARGET).work


def _topi(norm):
    X = ta.placeholder((N, C, HH, WW), F64, name="X")
    return X, norm(X)


def _numpy_norm(x: np.ndarray, groups: int) -> np.ndarray:
    g = x.reshape(N, groups, -1)
    mu = g.mean(axis=2, keepdims=True)
    var = ((g - mu) ** 2).mean(axis=2, keepdims=True)
    return ((g - mu) / np.sqrt(var + EPS)).reshape(x.shape)


@pytest.mark.parametrize("spelling", ["digits", "where"])
@pytest.mark.parametrize("groups", [3, 1, C], ids=["group", "layer", "instance"])
def test_hand_group_norm_gradient_shares_the_statistics_sums(groups, spelling, numeric_grad):
    """Four sums over each group (the mean, the variance, and the head's two brackets) and the
    gradient's pass: no bracket sums ``X`` over a group again beside the mean's sum."""
    X, Y = _hand_group_norm(groups, spelling)
    size = N * C * HH * WW
    work = _work(X, Y)
    assert work <= 5 * size + 3 * N * groups, f"hand {spelling} norm work {work}: a group summed twice"
    if groups > 1:
        assert work <= _work(*_topi(lambda t: ta.topi.nn.group_norm(t, groups)))

    dX, H = _gradient(X, Y)
    rng = np.random.default_rng(groups)
    x, h = rng.standard_normal(X.shape), rng.standard_normal(Y.shape)
    got = ta.build([dX], [X, H], target=TARGET)(x, h)
    (fd,) = numeric_grad(lambda a: _numpy_norm(a, groups), [x], head=h)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)


def test_hand_batch_norm_gradient_reaches_topi_work(numeric_grad):
    X, Y = _hand_batch_norm()
    assert _work(X, Y) <= _work(*_topi(ta.topi.nn.batch_norm))

    dX, H = _gradient(X, Y)
    rng = np.random.default_rng(4)
    x, h = rng.standard_normal(X.shape), rng.standard_normal(Y.shape)
    got = ta.build([dX], [X, H], target=TARGET)(x, h)

    def forward(a):
        mu = a.mean(axis=(0, 2, 3), keepdims=True)
        return (a - mu) / np.sqrt(((a - mu) ** 2).mean(axis=(0, 2, 3), keepdims=True) + EPS)

    (fd,) = numeric_grad(forward, [x], head=h)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)
