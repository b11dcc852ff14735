"""A program over a symbolic batch whose only dependence on the batch's size is a sum over the rows read
after it is made (batch norm's statistics) or the size read as a value (a mean loss's ``1 / n``) is one
kernel for every size: stages of generic kernels, ``n`` passed at run time.  Each stage reads and
writes rows ``[0, n)`` only (NaN past the inputs' rows, a sentinel past the outputs'), forward and
backward against PyTorch float64, at sizes 1 to 1000, with 1 and 2 threads.  A sum over all of a
block's rows once ran whole blocks only: its partial sums, added into the total outside the loop over
rows, were taken for terms that read no row."""

import numpy as np
import pytest

import tensorad as ta

torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
SIZES = (1, 2, 7, 17, 64, 255, 256, 257, 1000)


def _padded(rng, shape, size, fill=np.nan):
    """Random float32 rows ``[0, size)`` of an array with 3 more rows of ``fill``: a read past the
    rows shows in the results."""
    big = np.full((size + 3, *shape), fill, np.float32)
    big[:size] = rng.standard_normal((size, *shape))
    return big


def _run(kernel, arrays, size, shapes):
    """The kernel's outputs written into the first ``size`` rows (or the whole) of sentinel arrays,
    checked untouched past them."""
    outs = [np.full(s, 7.0, np.float32) for s in shapes]
    views = [o[:size] if o.ndim and o.shape[0] == size + 3 else o for o in outs]
    kernel(*arrays, out=tuple(views))
    for o, v in zip(outs, views):
        assert v.base is None or (o[size:] == 7.0).all()
    return [np.asarray(v, np.float64) for v in views]


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_batch_norm_is_one_kernel_at_every_size(threads):
    n = ta.size_var("n")
    X = ta.placeholder((n, 3, 4, 5), name="X")
    g, b = ta.placeholder((3,), name="g"), ta.placeholder((3,), name="b")
    Y = ta.topi.nn.batch_norm(X, g, b, training=True)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(ta.topi.sum(Y * H), [X, g, b])
    forward = ta.build(Y, [X, g, b], num_threads=threads)
    backward = ta.build(grads, [X, g, b, H], num_threads=threads)
    assert forward.generic and backward.generic and forward.why == backward.why == ""
    assert all(forward.bounded) and all(backward.bounded)
    rng = np.random.default_rng(0)
    gv, bv = rng.uniform(0.5, 1.5, 3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    for size in SIZES:
        x, h = _padded(rng, (3, 4, 5), size), _padded(rng, (3, 4, 5), size)
        (y,) = _run(forward, [x[:size], gv, bv], size, [x.shape])
        dx, dg, db = _run(backward, [x[:size], gv, bv, h[:size]], size, [x.shape, (3,), (3,)])
        xt = torch.tensor(x[:size], dtype=torch.float64, requires_grad=True)
        gt = torch.tensor(gv, dtype=torch.float64, requires_grad=True)
        bt = torch.tensor(bv, dtype=torch.float64, requires_grad=True)
        if size == 1:  # (one row of one value per channel and pixel: PyTorch refuses it, the formula holds)
            mean = xt.mean((0, 2, 3), keepdim=True)
            var = ((xt - mean) ** 2).mean((0, 2, 3), keepdim=True)
            yt = (xt - mean) / torch.sqrt(var + 1e-5) * gt[:, None, None] + bt[:, None, None]
        else:
            yt = torch.nn.functional.batch_norm(xt, None, None, gt, bt, training=True, eps=1e-5)
        (yt * torch.tensor(h[:size], dtype=torch.float64)).sum().backward()
        np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-4, atol=1e-4)
        for got, want in ((dx, xt.grad), (dg, gt.grad), (db, bt.grad)):
            np.testing.assert_allclose(got, want.numpy(), rtol=1e-3, atol=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_mean_log_softmax_nll_is_one_kernel_at_every_size(threads):
    n = ta.size_var("n")
    Z, T = ta.placeholder((n, 11), name="Z"), ta.placeholder((n, 11), name="T")
    loss = ta.topi.multiply(ta.topi.sum(ta.topi.multiply(T, ta.topi.nn.log_softmax(Z))), -1.0 / n)
    (dZ,) = ta.JacobianRecursive(loss, [Z])
    forward, backward = ta.build(loss, [Z, T], num_threads=threads), ta.build(dZ, [Z, T], num_threads=threads)
    assert forward.generic and backward.generic and forward.why == backward.why == ""
    rng = np.random.default_rng(1)
    for size in SIZES:
        z = _padded(rng, (11,), size)
        t = np.zeros((size + 3, 11), np.float32)
        t[np.arange(size), rng.integers(0, 11, size)] = 1.0
        t[size:] = np.nan
        (got,) = _run(forward, [z[:size], t[:size]], size, [()])
        (grad,) = _run(backward, [z[:size], t[:size]], size, [z.shape])
        zt = torch.tensor(z[:size], dtype=torch.float64, requires_grad=True)
        want = torch.nn.functional.nll_loss(torch.log_softmax(zt, 1), torch.tensor(t[:size].argmax(1)))
        want.backward()
        np.testing.assert_allclose(got, want.item(), rtol=1e-5)
        np.testing.assert_allclose(grad, zt.grad.numpy(), rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_staged_kernel_at_infinities_matches_the_static_kernel():
    """An infinity in a row makes the batch's statistics NaN: every size's outputs are the static
    kernel's, NaN where it has NaN."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 3, 2, 2), name="X")
    g, b = ta.placeholder((3,), name="g"), ta.placeholder((3,), name="b")
    Y = ta.topi.nn.batch_norm(X, g, b, training=True)
    kernel = ta.build(Y, [X, g, b])
    rng = np.random.default_rng(2)
    gv, bv = np.ones(3, np.float32), np.zeros(3, np.float32)
    for size in (1, 7, 64):
        x = rng.standard_normal((size, 3, 2, 2)).astype(np.float32)
        x[size // 2, 1, 0, 1] = np.inf
        ys, xs = ta.bind([Y, X], n=size)
        static = ta.build(ys, [xs, g, b])
        np.testing.assert_allclose(kernel(x, gv, bv), static(x, gv, bv), rtol=1e-5, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("size", [1, 7, 255, 256, 257, 1000])
def test_a_sum_of_all_of_a_blocks_rows_takes_the_count(size):
    """A float sum over every element of 256 rows is blocked (partial sums added into the total): the
    256-row block takes the count of rows, and a call adds the given rows only."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 64), name="X")
    k, j = ta.reduce_axis((0, n), "k"), ta.reduce_axis((0, 64), "j")
    S = ta.compute((), lambda: ta.sum(X[k, j] * X[k, j], axis=[k, j]), name="S")
    kernel = ta.build(S, [X])
    assert kernel.generic and kernel.why == "" and all(kernel.bounded)
    x = _padded(np.random.default_rng(size), (64,), size)
    np.testing.assert_allclose(kernel(x[:size]), (x[:size].astype(np.float64) ** 2).sum(), rtol=1e-5)
