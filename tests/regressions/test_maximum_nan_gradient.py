"""Elementwise ``ta.maximum(a, b)`` / ``ta.minimum(a, b)`` where ``a`` or ``b`` is NaN: the two are
unordered, neither wins, and tensorad gave each operand half of the gradient -- the rule of a
tie.  PyTorch's backward gives each the whole gradient (``where(a == b, g / 2, g)`` masked
where the other side wins: an unordered pair is neither equal nor masked).  The rule now
(docs/conventions.md): ``a`` wins: ``da``; ``b`` wins: ``db``; ``a == b``: ``(da + db) / 2``;
unordered: ``da + db`` -- in every path (one tangent rule: reverse, ``jvp``, HVP, ``ta.function``;
``ta.evaluate`` and built kernels).  PyTorch's forward mode gives ``db`` at a NaN, not the
transpose of its own backward; ``jvp`` here is the transpose of the backward.
Oracles: torch float64 autograd."""

from __future__ import annotations

import numpy as np
import pytest
import torch  # (a test dependency: `make test` installs tensorad[torch])
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import examples

import tensorad as ta

F = "float64"
N = 6
SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, -1.0]
arrays = st.lists(st.sampled_from(SPECIAL), min_size=N, max_size=N).map(np.array)
OPTIONS = [dict(opt_level=0), dict(), dict(fastmath=True)]


def _program():
    a, b, w, v = (ta.placeholder((N,), F, name=n) for n in "ABWV")
    k = ta.reduce_axis((0, N), name="k")
    # (a * a: the HVP sees a second derivative through the winner's side)
    y = ta.compute((N,), lambda i: w[i] * ta.maximum(a[i] * a[i], b[i]) + v[i] * ta.minimum(a[i], b[i]),
                   name="Y")
    loss = ta.compute((), lambda: ta.sum(y[k], axis=k), name="loss")
    return (a, b, w, v), y, loss


def _torch_grads(av, bv, wv, vv):
    a, b = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in (av, bv))
    w, v = torch.tensor(wv), torch.tensor(vv)
    loss = (w * torch.maximum(a * a, b) + v * torch.minimum(a, b)).sum()
    ga, gb = torch.autograd.grad(loss, (a, b), create_graph=True)
    return a, b, ga, gb


def _same(got, want):  # (NaN where torch has NaN; the sums' order may differ by an ulp)
    np.testing.assert_allclose(np.asarray(got), want.detach().numpy(), rtol=1e-14)


PROGRAM = _program()
(A, B, W, V), Y, LOSS = PROGRAM
DA, DB = ta.placeholder((N,), F, name="dA"), ta.placeholder((N,), F, name="dB")


@pytest.fixture(scope="module")
def grads() -> list:
    return ta.gradient(LOSS, [A, B])


@pytest.fixture(scope="module")
def kernels(grads) -> tuple:
    """The gradient's kernels (one per set of options), the JVP's and the HVP's: built once, by the
    worker that runs the test reading them."""
    jvp = ta.jvp(Y, [A, B], [DA, DB])
    hvp = ta.hessian_vector_product(LOSS, [A, B], [DA, DB])
    return ([ta.build(grads, [A, B, W, V], **o) for o in OPTIONS], ta.build([jvp], [A, B, W, V, DA, DB]),
            ta.build(hvp, [A, B, W, V, DA, DB]))


@settings(max_examples=examples(40), deadline=None, derandomize=True)
@given(arrays, arrays)
def test_reverse_jvp_and_hvp_match_torch(kernels, av, bv):
    grad_kernels, jvp_kernel, hvp_kernel = kernels
    wv, vv = np.linspace(1, 2, N), np.linspace(3, 5, N)
    a, b, ga, gb = _torch_grads(av, bv, wv, vv)
    for kern in grad_kernels:
        got = kern(av, bv, wv, vv)
        _same(got[0], ga)
        _same(got[1], gb)
    # jvp: the transpose of the backward, per element: dY = (dY/dA) dA + (dY/dB) dB
    dav, dbv = np.linspace(-1, 1, N), np.linspace(2, 7, N)
    with np.errstate(invalid="ignore"):
        want = ga.detach().numpy() * dav + gb.detach().numpy() * dbv
    np.testing.assert_allclose(jvp_kernel(av, bv, wv, vv, dav, dbv), want, rtol=1e-14)  # (sum order)
    # HVP: torch's double backward
    hv = torch.autograd.grad((ga * torch.tensor(dav)).sum() + (gb * torch.tensor(dbv)).sum(), (a, b),
                             allow_unused=True)
    got = hvp_kernel(av, bv, wv, vv, dav, dbv)
    for g, h in zip(got, hv):
        np.testing.assert_allclose(g, np.zeros(N) if h is None else h.numpy(), rtol=1e-14)


def test_evaluate_and_function_give_the_whole_gradient_to_both_sides_of_a_nan(grads):
    av = np.array([np.nan, 1.0, np.nan, 2.0, np.inf, -np.inf])
    bv = np.array([1.0, np.nan, np.nan, 4.0, np.inf, 0.0])
    wv, vv = np.linspace(1, 2, N), np.linspace(3, 5, N)
    _, _, ga, gb = _torch_grads(av, bv, wv, vv)
    feed = {A: av, B: bv, W: wv, V: vv}
    got = ta.evaluate(grads, feed)
    _same(got[0], ga)
    _same(got[1], gb)
    f = ta.function([Y], [A, B, W, V], wrt=[A, B])
    _, res = f.forward(av, bv, wv, vv)
    got = f.backward(res, np.ones(N))
    _same(got[0], ga)
    _same(got[1], gb)
