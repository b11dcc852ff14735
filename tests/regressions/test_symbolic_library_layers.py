"""Programs over a size variable that the static path compiles but that were refused when written over
the size: library layers that decided on a size in Python, and a read whose index is a remainder modulo
the size."""

import numpy as np

import tensorad as ta

HASWELL = {"target": "llvm -mcpu=haswell"}


def _layers(n):
    x = ta.placeholder((3, n), name="x")
    y = ta.topi.add(ta.topi.var(x, axis=1, ddof=1), ta.topi.sum(ta.topi.nn.rms_norm(x), axis=1))
    z = ta.topi.sum(ta.topi.concatenate([x, x * -2.0], axis=1), axis=1)
    out = ta.topi.add(y, z)
    h = ta.placeholder(out.shape, name="h")
    return [out, *ta.JacobianRecursive(out, [x], h)], [x, h]


def test_variance_rms_norm_and_concatenation_over_a_size():
    """``var``, ``rms_norm`` and ``concatenate`` over a size asked Python whether a count beat ``ddof`` or
    whether an extent was positive: decisions made only at static sizes, so the programs were refused.
    They take their factors as expressions in the sizes, computed in float64 as the static ones are."""
    symbolic = ta.lower(*_layers(ta.size_var("n", min=2)), **HASWELL)
    for n in (2, 5):
        assert symbolic.work_at(n=n) == ta.lower(*_layers(n), **HASWELL).work, f"n={n}"
    outs, ins = _layers(ta.size_var("n", min=2))
    rng = np.random.default_rng(0)
    x, h = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    got = ta.build(outs, ins, **HASWELL)(x, h)
    x64 = x.astype(np.float64)
    rms = x64 / np.sqrt((x64 * x64).mean(axis=1, keepdims=True) + np.finfo(np.float32).eps)
    np.testing.assert_allclose(got[0], x64.var(axis=1, ddof=1) + rms.sum(axis=1) - x64.sum(axis=1), rtol=1e-5)
    static_outs, static_ins = _layers(6)
    for g, w in zip(got, ta.evaluate(static_outs, dict(zip(static_ins, (x, h))))):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _attention(d):
    q = ta.placeholder((2, 4, d), name="q")
    y = ta.topi.sum(ta.topi.nn.scaled_dot_product_attention(q, q, q), axis=(1, 2))
    h = ta.placeholder(y.shape, name="h")
    return [y, *ta.JacobianRecursive(y, [q], h)], [q, h]


def test_attention_over_a_symbolic_head_width():
    """``scaled_dot_product_attention`` of queries whose width ``d`` is a size took ``1 / sqrt(d)`` in
    Python, a decision made only at static sizes.  The scale is an expression in ``d``, computed in
    float64 and bound to the static program's constant; the optimizer takes it for the constant it
    becomes (a square root of a size is no math to keep a product of it from its readers), so the
    gradient does the static program's work."""
    symbolic = ta.lower(*_attention(ta.size_var("d")), **HASWELL)
    for d in (1, 5):
        assert symbolic.work_at(d=d) == ta.lower(*_attention(d), **HASWELL).work, f"d={d}"
    rng = np.random.default_rng(2)
    x, h = rng.standard_normal((2, 4, 5)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
    y, dq = ta.build(*_attention(ta.size_var("d")), **HASWELL)(x, h)
    s = np.einsum("bld,bsd->bls", x.astype(np.float64), x) / np.sqrt(5)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(y, ((p / p.sum(axis=-1, keepdims=True)) @ x).sum(axis=(1, 2)), rtol=1e-5)
    static_outs, static_ins = _attention(5)
    want = ta.evaluate(static_outs, dict(zip(static_ins, (x, h))))[1]
    np.testing.assert_allclose(dq, want, rtol=1e-4, atol=1e-5)


def _wrapped(n):
    x = ta.placeholder((n, 2), name="x")
    y = ta.compute((7, 2), lambda i, j: x[(i * 3 + 1) % n, j] * 2.0, name="y")
    h = ta.placeholder(y.shape, name="h")
    return [y, *ta.JacobianRecursive(y, [x], h)], [x, h]


def test_a_read_modulo_its_own_extent_is_in_bounds():
    """``x[(3 * i + 1) % n]`` of a tensor of ``n`` rows: the remainder modulo a size is no quasi-affine
    index, so the bounds check refused the read; a remainder modulo the read extent itself, a positive
    size, lies in it by its form."""
    symbolic = ta.lower(*_wrapped(ta.size_var("n")), **HASWELL)
    for n in (1, 3, 9):
        assert symbolic.work_at(n=n) == ta.lower(*_wrapped(n), **HASWELL).work, f"n={n}"
    outs, ins = _wrapped(ta.size_var("n"))
    rng = np.random.default_rng(1)
    x, h = rng.standard_normal((4, 2)).astype(np.float32), rng.standard_normal((7, 2)).astype(np.float32)
    y, dx = ta.build(outs, ins, **HASWELL)(x, h)
    rows = (np.arange(7) * 3 + 1) % 4
    np.testing.assert_allclose(y, x[rows] * 2.0, rtol=1e-6)
    want = np.zeros_like(x)
    np.add.at(want, rows, 2.0 * h)
    np.testing.assert_allclose(dx, want, rtol=1e-6)


def _max_past_the_first_row(n):
    x = ta.placeholder((n, 2), name="x")
    r = ta.reduce_axis((1, n), name="r")
    y = ta.compute((2,), lambda j: ta.max(x[r, j], axis=r), name="y")
    h = ta.placeholder(y.shape, name="h")
    return [y, *ta.JacobianRecursive(y, [x], h)], [x, h]


def test_a_max_over_an_axis_that_may_be_empty():
    """A max over ``1 <= r < n`` with ``n >= 1``: its winner's flat index counts each axis as at least one
    point, and that took Python's ``max`` of the extent ``n - 1`` and 1, a decision made only at static
    sizes, so even the raw gradient was refused.  The count is an expression in the size."""
    symbolic = ta.lower(*_max_past_the_first_row(ta.size_var("n")), **HASWELL)
    for n in (1, 2, 5):
        assert symbolic.work_at(n=n) == ta.lower(*_max_past_the_first_row(n), **HASWELL).work, f"n={n}"
    outs, ins = _max_past_the_first_row(ta.size_var("n"))
    kernel = ta.build(outs, ins, **HASWELL)
    rng = np.random.default_rng(3)
    for n in (1, 5):
        x, h = rng.standard_normal((n, 2)).astype(np.float32), rng.standard_normal(2).astype(np.float32)
        y, dx = kernel(x, h)
        want = np.zeros_like(x)
        if n > 1:
            want[1 + np.argmax(x[1:], axis=0), [0, 1]] = h
        np.testing.assert_array_equal(y, x[1:].max(axis=0) if n > 1 else [-np.inf, -np.inf])
        np.testing.assert_array_equal(dx, want)


def _reshaped(n):
    x = ta.placeholder((n, 3), name="x")
    y = ta.topi.reshape(x, (3 * n,))
    z = ta.compute(y.shape, lambda k: y[k] * y[k], name="z")
    h = ta.placeholder(z.shape, name="h")
    return [z, *ta.JacobianRecursive(z, [x], h)], [x, h]


def test_a_reshape_into_a_product_of_a_size():
    """``reshape(x, (3 * n,))`` of an ``n x 3`` tensor: the target's entries in sizes had to be the
    source's own, so ``3 * n`` did not match ``n`` and 3 and the reshape was refused.  Both sizes are
    compared as a number times factors in sizes."""
    symbolic = ta.lower(*_reshaped(ta.size_var("n")), **HASWELL)
    for n in (1, 4):
        assert symbolic.work_at(n=n) == ta.lower(*_reshaped(n), **HASWELL).work, f"n={n}"
    rng = np.random.default_rng(5)
    x, h = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(12).astype(np.float32)
    z, dx = ta.build(*_reshaped(ta.size_var("n")), **HASWELL)(x, h)
    np.testing.assert_allclose(z, (x * x).ravel(), rtol=1e-6)
    np.testing.assert_allclose(dx, (2 * x.ravel() * h).reshape(4, 3), rtol=1e-6)


def _flattened(n):
    x = ta.placeholder((5, 7, n), name="x")
    y = ta.topi.nn.flatten(x)
    z = ta.compute(y.shape, lambda i, k: y[i, k] * y[i, k], name="z")
    h = ta.placeholder(z.shape, name="h")
    return [z, *ta.JacobianRecursive(z, [x], h)], [x, h]


def test_flatten_of_an_inner_size():
    """``flatten`` of a ``5 x 7 x n`` tensor reads ``x[i, k // n, k % n]`` for ``k < 7 * n``: its target
    ``7 * n`` was no entry of the source's shape, and ``k // n`` no quasi-affine index, so it was refused.
    A quotient by a positive size of an axis below that size times the read extent lies in the extent
    by its form."""
    symbolic = ta.lower(*_flattened(ta.size_var("n")), **HASWELL)
    for n in (1, 4):
        assert symbolic.work_at(n=n) == ta.lower(*_flattened(n), **HASWELL).work, f"n={n}"
    rng = np.random.default_rng(6)
    x, h = rng.standard_normal((5, 7, 4)).astype(np.float32), rng.standard_normal((5, 28)).astype(np.float32)
    z, dx = ta.build(*_flattened(ta.size_var("n")), **HASWELL)(x, h)
    np.testing.assert_allclose(z, (x * x).reshape(5, 28), rtol=1e-6)
    np.testing.assert_allclose(dx, 2 * x * h.reshape(5, 7, 4), rtol=1e-6)
