"""``ta.Jacobian(Y, X)`` when ``X`` reaches ``Y`` through other tensors: it used to give the
elementwise Jacobian of ``Y``'s body alone, silently zero (or missing terms).  The oracles are
NumPy formulas and central differences written here."""

import numpy as np

import tensorad as ta


def _fd_jacobian(fn, x, step=1e-6):
    out = fn(x)
    jac = np.zeros(out.shape + x.shape)
    for j in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[j] += step
        xm[j] -= step
        jac[(Ellipsis,) + j] = (fn(xp) - fn(xm)) / (2 * step)
    return jac


def test_jacobian_through_an_intermediate_tensor():
    x = ta.placeholder((4,), "float64", "X")
    z = ta.compute((4,), lambda i: x[i] * 2.0, "Z")
    y = ta.compute((3,), lambda i: ta.exp(z[i + 1]), "Y")
    xv = np.linspace(-1, 1, 4)
    got = ta.evaluate([ta.Jacobian(y, x)], {x: xv})[0]
    want = np.zeros((3, 4))
    for i in range(3):
        want[i, i + 1] = 2 * np.exp(2 * xv[i + 1])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_jacobian_through_direct_and_indirect_reads():
    x = ta.placeholder((2, 3), "float64", "X")
    s = ta.topi.sum(x, axis=1)  # s[i] = sum_k X[i, k]
    y = ta.compute((2, 3), lambda i, j: x[i, j] * s[i], "Y")
    xv = np.random.default_rng(0).uniform(-1, 1, (2, 3))
    got = ta.evaluate([ta.Jacobian(y, x)], {x: xv})[0]
    want = _fd_jacobian(lambda a: a * a.sum(1, keepdims=True), xv)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-8)


def test_jacobian_of_a_gradient_is_the_hessian():
    x = ta.placeholder((3,), "float64", "X")
    w = ta.placeholder((2, 3), "float64", "W")
    loss = ta.topi.sum(ta.topi.tanh(ta.topi.matmul(w, ta.topi.reshape(x, (3, 1)))))
    grad_w = ta.JacobianRecursive(loss, [w])[0]
    hess = ta.Jacobian(grad_w, w)
    assert hess.shape == (2, 3, 2, 3)
    xv = np.array([0.3, -0.7, 1.1])
    wv = np.random.default_rng(1).uniform(-1, 1, (2, 3))

    def np_grad(wa):  # d/dW sum tanh(W x) = (1 - tanh(W x)^2) x^T
        return (1 - np.tanh(wa @ xv) ** 2)[:, None] * xv[None, :]

    got = ta.evaluate([hess], {x: xv, w: wv})[0]
    np.testing.assert_allclose(got, _fd_jacobian(np_grad, wv), rtol=1e-6, atol=1e-8)
    built = ta.build([hess], [x, w])(xv, wv)
    np.testing.assert_allclose(built, got, rtol=1e-10, atol=1e-12)
