"""Gathers (``E[I[i], j]``) and their scatter-add gradients, end to end.

Oracles: NumPy formulas written here (``np.take``, ``np.add.at``), float64 central finite
differences, ``torch.autograd`` (where installed), and ``ta.evaluate`` against ``ta.build``.
Work: the gradient of a gather is one add per element read (``N*J``), never a pass over the
vocabulary (``V*N*J``).  Out-of-range indices raise (``mode="raise"``) in ``ta.evaluate`` and
in built kernels, naming the tensor, the value and the position; ``clip``/``wrap`` are
``np.take``'s.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tensorad as ta

F = "float64"
topi = ta.topi


def _weighted(y):
    """``sum(Y * H)`` and ``H``: a scalar loss with a random head."""
    h = ta.placeholder(y.shape, F, name="H")
    return topi.sum(topi.multiply(y, h)), h


def _grad_program(y, x):
    loss, h = _weighted(y)
    return ta.JacobianRecursive(loss, [x])[0], h


# ---- embedding ------------------------------------------------------------------------------

def test_embedding_value_gradient_and_work(rng, numeric_grad):
    """``W[I[b, t], d]``: NumPy, finite differences, evaluate vs build, and N*D work."""
    V, D = 9, 4
    w = ta.placeholder((V, D), F, name="W")
    ids = ta.placeholder((3, 5), "int64", name="I")
    y = topi.nn.embedding(w, ids)
    grad, h = _grad_program(y, w)
    wv, iv, hv = rng.normal(size=(V, D)), rng.integers(0, V, (3, 5)), rng.normal(size=(3, 5, D))
    got_y, got_g = ta.build([y, grad], [w, ids, h])(wv, iv, hv)
    np.testing.assert_array_equal(got_y, wv[iv])
    want = np.zeros_like(wv)
    np.add.at(want, iv, hv)  # the scatter-add, by NumPy
    np.testing.assert_allclose(got_g, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(numeric_grad(lambda a: np.sum(a[iv] * hv), [wv])[0], want, atol=1e-7)
    np.testing.assert_allclose(ta.evaluate(grad, {w: wv, ids: iv, h: hv}), want, rtol=1e-12, atol=1e-12)
    assert ta.lower([grad], [w, ids, h]).work == 3 * 5 * D  # N*J, not V*N*J


def test_embedding_matches_torch(rng):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    V, D = 11, 6
    w = ta.placeholder((V, D), F, name="W")
    ids = ta.placeholder((4, 7), "int32", name="I")
    y = topi.nn.embedding(w, ids)
    loss = topi.sum(topi.tanh(y))
    grad = ta.JacobianRecursive(loss, [w])[0]
    wv, iv = rng.normal(size=(V, D)), rng.integers(0, V, (4, 7)).astype(np.int32)
    got_l, got_g = ta.build([loss, grad], [w, ids])(wv, iv)
    tw = torch.tensor(wv, requires_grad=True)
    tl = torch.tanh(torch.nn.functional.embedding(torch.tensor(iv, dtype=torch.long), tw)).sum()
    tl.backward()
    np.testing.assert_allclose(got_l, tl.item(), rtol=1e-12)
    np.testing.assert_allclose(got_g, tw.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_embedding_bag_matches_torch(reduce, rng, numeric_grad):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    V, D, B, n = 8, 5, 3, 4
    w = ta.placeholder((V, D), F, name="W")
    ids = ta.placeholder((B, n), "int64", name="I")
    y = topi.nn.embedding_bag(w, ids, reduce=reduce)
    grad, h = _grad_program(y, w)
    wv, iv, hv = rng.normal(size=(V, D)), rng.integers(0, V, (B, n)), rng.normal(size=(B, D))
    got_y, got_g = ta.build([y, grad], [w, ids, h])(wv, iv, hv)
    tw = torch.tensor(wv, requires_grad=True)
    ty = torch.nn.functional.embedding_bag(torch.tensor(iv), tw, mode=reduce)
    (ty * torch.tensor(hv)).sum().backward()
    np.testing.assert_allclose(got_y, ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_g, tw.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(numeric_grad(lambda a: np.sum(ta.evaluate(y, {w: a, ids: iv}) * hv), [wv])[0],
                               got_g, atol=1e-7)
    assert ta.lower([grad], [w, ids, h]).work == B * n * D


def test_embedding_bag_with_per_sample_weights(rng):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    w = ta.placeholder((6, 3), F, name="W")
    ids = ta.placeholder((2, 4), "int64", name="I")
    psw = ta.placeholder((2, 4), F, name="P")
    y = topi.nn.embedding_bag(w, ids, reduce="sum", per_sample_weights=psw)
    grad_w, grad_p = ta.JacobianRecursive(topi.sum(y), [w, psw])
    wv, iv, pv = rng.normal(size=(6, 3)), rng.integers(0, 6, (2, 4)), rng.normal(size=(2, 4))
    got_y, gw, gp = ta.build([y, grad_w, grad_p], [w, ids, psw])(wv, iv, pv)
    tw, tp = torch.tensor(wv, requires_grad=True), torch.tensor(pv, requires_grad=True)
    ty = torch.nn.functional.embedding_bag(torch.tensor(iv), tw, mode="sum", per_sample_weights=tp)
    ty.sum().backward()
    np.testing.assert_allclose(got_y, ty.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(gw, tw.grad.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gp, tp.grad.numpy(), rtol=1e-12, atol=1e-12)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cuts=st.lists(st.integers(0, 9), min_size=0, max_size=4), reduce=st.sampled_from(["sum", "mean"]),
       weighted=st.booleans())
def test_ragged_embedding_bag_matches_torch(cuts, reduce, weighted):
    """Bags of any lengths (PyTorch's ``offsets``), empty ones included, against
    ``torch.nn.functional.embedding_bag``: values and gradients (weights and per-sample
    weights), with ``n * dim`` work for the sum and its gradient plus ``bags * n`` to find
    each index's bag."""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    weighted = weighted and reduce == "sum"
    V, D, n = 7, 3, 9
    offsets = np.array([0] + sorted(cuts), np.int64)
    bags = len(offsets)
    w = ta.placeholder((V, D), F, name="W")
    ids = ta.placeholder((n,), "int64", name="I")
    off = ta.placeholder((bags,), "int64", name="offsets")
    psw = ta.placeholder((n,), F, name="P") if weighted else None
    y = topi.nn.embedding_bag(w, ids, reduce, per_sample_weights=psw, offsets=off)
    wrt = [w] + ([psw] if weighted else [])
    loss, h = _weighted(y)
    grads = ta.JacobianRecursive(loss, wrt)
    rng = np.random.default_rng(len(cuts))
    wv, iv = rng.normal(size=(V, D)), rng.integers(0, V, n)
    hv, pv = rng.normal(size=(bags, D)), rng.normal(size=n)
    feeds = [wv, iv, offsets] + ([pv] if weighted else []) + [hv]
    got = ta.build([y, *grads], [w, ids, off] + ([psw] if weighted else []) + [h])(*feeds)
    tw, tp = torch.tensor(wv, requires_grad=True), torch.tensor(pv, requires_grad=True)
    ty = torch.nn.functional.embedding_bag(torch.tensor(iv), tw, torch.tensor(offsets), mode=reduce,
                                           per_sample_weights=tp if weighted else None)
    (ty * torch.tensor(hv)).sum().backward()
    np.testing.assert_allclose(got[0], ty.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got[1], tw.grad.numpy(), rtol=1e-12, atol=1e-12)
    if weighted:
        np.testing.assert_allclose(got[2], tp.grad.numpy(), rtol=1e-12, atol=1e-12)
    if reduce == "sum" and not weighted:
        assert ta.lower([y], [w, ids, off]).work <= bags * n + n * D
        assert ta.lower([grads[0]], [ids, off, h]).work <= bags * n + n * D


def test_ragged_embedding_bag_rejects_an_index_before_the_first_offset():
    w = ta.placeholder((5, 2), F, name="W")
    ids, off = ta.placeholder((4,), "int64", name="I"), ta.placeholder((2,), "int64", name="offsets")
    y = topi.nn.embedding_bag(w, ids, "sum", offsets=off)
    kern = ta.build([y], [w, ids, off])
    args = (np.ones((5, 2)), np.zeros(4, np.int64), np.array([1, 2], np.int64))
    with pytest.raises(IndexError, match="before offsets"):
        kern(*args)
    with pytest.raises(IndexError, match="before offsets"):
        ta.evaluate([y], dict(zip((w, ids, off), args)))
    with pytest.raises(ValueError, match="1-d"):
        topi.nn.embedding_bag(w, ta.placeholder((2, 2), "int64", name="J"), offsets=off)


# ---- index_select and take along every axis -------------------------------------------------

def test_index_select_matches_torch(rng):
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    x = ta.placeholder((4, 6, 3), F, name="X")
    ids = ta.placeholder((5,), "int32", name="I")
    y = topi.index_select(x, ids, axis=1)
    grad, h = _grad_program(y, x)
    xv, iv, hv = rng.normal(size=(4, 6, 3)), np.array([5, 0, 5, 2, 1], np.int32), rng.normal(size=(4, 5, 3))
    got_y, got_g = ta.build([y, grad], [x, ids, h])(xv, iv, hv)
    tx = torch.tensor(xv, requires_grad=True)
    ty = torch.index_select(tx, 1, torch.tensor(iv, dtype=torch.long))
    (ty * torch.tensor(hv)).sum().backward()
    np.testing.assert_array_equal(got_y, ty.detach().numpy())
    np.testing.assert_allclose(got_g, tx.grad.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("axis", [0, 1, 2, -1, None])
def test_take_along_every_axis(axis, rng, numeric_grad):
    """``np.take(X, I, axis)`` for a 3-d X and a 2-d I; the gradient by finite differences and
    ``np.add.at``; work: one add per element taken."""
    shape = (4, 5, 3)
    x = ta.placeholder(shape, F, name="X")
    n = int(np.prod(shape)) if axis is None else shape[axis]
    ids = ta.placeholder((2, 3), "int32", name="I")
    y = topi.take(x, ids, axis=axis)
    grad, h = _grad_program(y, x)
    xv, iv = rng.normal(size=shape), rng.integers(0, n, (2, 3)).astype(np.int32)
    want_y = np.take(xv, iv, axis=axis)
    hv = rng.normal(size=want_y.shape)
    got_y, got_g = ta.build([y, grad], [x, ids, h])(xv, iv, hv)
    np.testing.assert_array_equal(got_y, want_y)
    want_g = numeric_grad(lambda a: np.take(a, iv, axis=axis), [xv], hv)[0]
    np.testing.assert_allclose(got_g, want_g, atol=1e-7)
    assert ta.lower([grad], [x, ids, h]).work == want_y.size


# ---- integer-label losses read the labelled logit with a gather ----------------------------

def test_cross_entropy_picks_the_label_with_one_read_per_row():
    """The forward reads one logit per row for the label (a pass over the classes cost C reads
    per row): the loss nest reads X once per row."""
    n, c = 6, 50
    x = ta.placeholder((n, c), F, name="X")
    labels = ta.placeholder((n,), "int32", name="L")
    y = topi.nn.cross_entropy(x, labels, "sum")
    text = str(ta.lower([y], [x, labels]))
    assert "data_index(L[" in text
    xv, lv = np.random.default_rng(1).normal(size=(n, c)), np.array([0, 49, 3, -100, 7, 7], np.int32)
    m = xv.max(1)
    lse = m + np.log(np.exp(xv - m[:, None]).sum(1))
    keep = lv != -100
    want = np.sum(np.where(keep, lse - xv[np.arange(n), np.where(keep, lv, 0)], 0.0))
    np.testing.assert_allclose(ta.build([y], [x, labels])(xv, lv), want, rtol=1e-12)


@pytest.mark.parametrize("loss", ["cross_entropy", "nll_loss"])
def test_a_label_out_of_range_raises(loss):
    x = ta.placeholder((3, 4), F, name="X")
    labels = ta.placeholder((3,), "int32", name="L")
    y = getattr(topi.nn, loss)(x, labels)
    grad = ta.JacobianRecursive(y, [x])[0]
    xv = np.zeros((3, 4))
    for bad in (4, -1):
        lv = np.array([0, bad, -100], np.int32)
        with pytest.raises(IndexError, match=rf"L\(.*\) = {bad} indexes axis 1 of tensor X, of size 4"):
            ta.build([y, grad], [x, labels])(xv, lv)
        with pytest.raises(IndexError, match=f"= {bad} indexes axis 1 of tensor X"):
            ta.evaluate(y, {x: xv, labels: lv})


# ---- out-of-range indices, modes ------------------------------------------------------------

def _gather_program(mode):
    e = ta.placeholder((5, 3), F, name="E")
    ids = ta.placeholder((4,), "int32", name="I")
    y = ta.compute((4, 3), lambda i, j: e.take(ids[i], j, mode=mode), name="Y")
    return e, ids, y


@pytest.mark.parametrize("bad", [5, 7, -1, -6])
def test_an_index_out_of_range_raises_in_evaluate_and_in_kernels(bad):
    e, ids, y = _gather_program("raise")
    ev, iv = np.ones((5, 3)), np.array([0, 2, bad, 1], np.int32)
    msg = rf"gather index out of range: I\(i\) = {bad} indexes axis 0 of tensor E, of size 5"
    with pytest.raises(IndexError, match=msg + r".*at Y at i=2"):
        ta.evaluate(y, {e: ev, ids: iv})
    for checked in (False, True):
        with pytest.raises(IndexError, match=msg + r".*at I\[2\]"):
            ta.build([y], [e, ids], checked=checked)(ev, iv)
    grad, h = _grad_program(y, e)  # the scatter-add checks its index too
    with pytest.raises(IndexError, match=msg):
        ta.build([grad], [e, ids, h])(ev, iv, np.ones((4, 3)))


@pytest.mark.parametrize("mode", ["clip", "wrap"])
def test_clip_and_wrap_match_numpy_take(mode):
    e, ids, y = _gather_program(mode)
    grad, h = _grad_program(y, e)
    ev = np.arange(15.0).reshape(5, 3)
    iv = np.array([-7, 5, 12, 3], np.int32)
    hv = np.random.default_rng(0).normal(size=(4, 3))
    want = np.take(ev, iv, axis=0, mode=mode)
    got_y, got_g = ta.build([y, grad], [e, ids, h])(ev, iv, hv)
    np.testing.assert_array_equal(got_y, want)
    np.testing.assert_array_equal(ta.evaluate(y, {e: ev, ids: iv}), want)
    rows = np.take(np.arange(5), iv, mode=mode)
    want_g = np.zeros_like(ev)
    np.add.at(want_g, rows, hv)
    np.testing.assert_allclose(got_g, want_g, rtol=1e-12)


def test_a_guarded_gather_may_hold_any_index():
    """``if_then_else(I[i] >= 0, E[I[i], j], 0)`` (a padding id -1): the lazy branch is the only
    place the index is checked, in the value and in the gradient."""
    e = ta.placeholder((5, 3), F, name="E")
    ids = ta.placeholder((4,), "int32", name="I")
    y = ta.compute((4, 3), lambda i, j: ta.if_then_else(ids[i] >= 0, e[ids[i], j] * 2.0, 0.0), name="Y")
    grad, h = _grad_program(y, e)
    ev, iv, hv = np.arange(15.0).reshape(5, 3), np.array([4, -1, 0, -1], np.int32), np.ones((4, 3))
    got_y, got_g = ta.build([y, grad], [e, ids, h])(ev, iv, hv)
    want_y = np.where(iv[:, None] >= 0, ev[np.maximum(iv, 0)] * 2, 0.0)
    np.testing.assert_array_equal(got_y, want_y)
    np.testing.assert_array_equal(ta.evaluate(y, {e: ev, ids: iv}), want_y)
    want_g = np.zeros_like(ev)
    want_g[[4, 0]] = 2.0
    np.testing.assert_array_equal(got_g, want_g)
    np.testing.assert_array_equal(ta.evaluate(grad, {e: ev, ids: iv, h: hv}), want_g)


# ---- forward mode, second order -------------------------------------------------------------

def test_the_tangent_of_a_gather_is_a_gather_of_the_tangent(rng):
    w = ta.placeholder((6, 3), F, name="W")
    ids = ta.placeholder((5,), "int32", name="I")
    v = ta.placeholder((6, 3), F, name="V")
    y = ta.compute((5, 3), lambda i, j: ta.sin(w[ids[i], j]), name="Y")
    t = ta.jvp(y, [w], [v])
    wv, iv, vv = rng.normal(size=(6, 3)), np.array([5, 0, 0, 3, 2], np.int32), rng.normal(size=(6, 3))
    want = np.cos(wv[iv]) * vv[iv]
    np.testing.assert_allclose(ta.build([t], [w, ids, v])(wv, iv, vv), want, rtol=1e-12)
    assert ta.lower([t], [w, ids, v]).work == 5 * 3


def test_hessian_vector_product_through_a_gather(rng):
    """``L = sum_i,j E[I[i], j]^3``: H.v by forward-over-reverse, against central differences
    of the (scatter-add) gradient."""
    e = ta.placeholder((4, 2), F, name="E")
    ids = ta.placeholder((6,), "int32", name="I")
    y = ta.compute((6, 2), lambda i, j: e[ids[i], j] * e[ids[i], j] * e[ids[i], j], name="Y")
    loss = topi.sum(y)
    grad = ta.JacobianRecursive(loss, [e])[0]
    v = ta.placeholder((4, 2), F, name="V")
    hv = ta.hessian_vector_product(loss, [e], [v])[0]
    ev, iv, vv = rng.normal(size=(4, 2)), np.array([3, 3, 0, 1, 3, 0], np.int32), rng.normal(size=(4, 2))
    first = ta.build([grad], [e, ids])
    eps = 1e-6
    want = (first(ev + eps * vv, iv) - first(ev - eps * vv, iv)) / (2 * eps)
    np.testing.assert_allclose(ta.build([hv], [e, ids, v])(ev, iv, vv), want, rtol=1e-6, atol=1e-8)


# ---- random index data ----------------------------------------------------------------------

_E = ta.placeholder((6, 4), F, name="E")
_I = ta.placeholder((3, 5), "int32", name="I")
_PROGRAMS = {}


def _program(mode, axis):
    if (mode, axis) not in _PROGRAMS:
        y = topi.take(_E, _I, axis=axis, mode=mode)
        grad, h = _grad_program(y, _E)
        _PROGRAMS[mode, axis] = (y, grad, h, ta.build([y, grad], [_E, _I, h]))
    return _PROGRAMS[mode, axis]


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(mode=st.sampled_from(["raise", "clip", "wrap"]), axis=st.sampled_from([0, 1]),
       ids=st.lists(st.integers(-9, 9), min_size=15, max_size=15), seed=st.integers(0, 99))
def test_random_index_data(mode, axis, ids, seed):
    """Kernels equal ``np.take`` and an ``np.add.at`` scatter for any index data; out-of-range
    data under ``raise`` is an ``IndexError``, in ``ta.evaluate`` and in the kernel alike."""
    y, grad, h, kernel = _program(mode, axis)
    rng = np.random.default_rng(seed)
    ev, iv = rng.normal(size=(6, 4)), np.array(ids, np.int32).reshape(3, 5)
    n = ev.shape[axis]
    want_y = None
    if mode != "raise" or ((iv >= 0) & (iv < n)).all():
        want_y = np.take(ev, iv, axis=axis, mode=mode if mode != "raise" else "raise")
    hv = rng.normal(size=y.shape)
    if want_y is None:
        with pytest.raises(IndexError, match="gather index out of range"):
            kernel(ev, iv, hv)
        with pytest.raises(IndexError, match="gather index out of range"):
            ta.evaluate(y, {_E: ev, _I: iv})
        return
    got_y, got_g = kernel(ev, iv, hv)
    np.testing.assert_array_equal(got_y, want_y)
    rows = np.take(np.arange(n), iv, mode=mode if mode != "raise" else "raise")
    want_g = np.zeros_like(ev)
    if axis == 0:
        np.add.at(want_g, rows, hv)
    else:
        np.add.at(want_g.T, rows, np.moveaxis(hv, 0, -1))
    np.testing.assert_allclose(got_g, want_g, rtol=1e-12, atol=1e-12)


def test_exported_and_pickled_kernels_keep_the_check(tmp_path):
    """The run-time check travels: ``ta.load`` raises, the C function returns its code."""
    import ctypes
    import pickle

    e, ids, y = _gather_program("raise")
    kernel = ta.build([y], [e, ids])
    ev, good, bad = np.ones((5, 3)), np.array([0, 4, 1, 1], np.int32), np.array([0, 9, 1, 1], np.int32)
    path = kernel.export(tmp_path / "gather.so")
    for k in (ta.load(path), pickle.loads(pickle.dumps(kernel))):
        np.testing.assert_array_equal(k(ev, good), ev[good])
        with pytest.raises(IndexError, match=r"I\(i\) = 9 indexes axis 0 of tensor E.*at I\[1\]"):
            k(ev, bad)
    assert "int gather(" in (tmp_path / "gather.h").read_text()
    fn = ctypes.CDLL(path).gather
    fn.restype = ctypes.c_int
    out = np.zeros((4, 3))
    for idx, want in ((good, 0), (bad, 1)):
        got = fn(ev.ctypes.data_as(ctypes.c_void_p), idx.ctypes.data_as(ctypes.c_void_p),
                 out.ctypes.data_as(ctypes.c_void_p), 1)
        assert (got != 0) == bool(want)


def test_index_arithmetic_around_a_gather_may_share_nodes_with_it():
    """Inlining ``A[i] = X[i % 2]`` into ``A[I[j] * 2 + 1]`` puts index arithmetic around the
    gather that shares the constant 2 with the arithmetic inside it (a fuzz find)."""
    x = ta.placeholder((2, 3), F, name="X")
    ids = ta.placeholder((4,), "int32", name="I")
    a = ta.compute((5, 3), lambda i, j: x[i % 2, j] * 2.0, name="A")
    y = ta.compute((4, 3), lambda i, j: a.take(ids[i] * 2 + 1, j, mode="clip"), name="Y")
    xv, iv = np.arange(6.0).reshape(2, 3), np.array([-1, 0, 1, 7], np.int32)
    rows = np.clip(iv * 2 + 1, 0, 4) % 2
    np.testing.assert_array_equal(ta.build([y], [x, ids])(xv, iv), xv[rows] * 2)
