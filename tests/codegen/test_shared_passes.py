"""Passes shared by siblings (codegen/loops/strip_groups.py, codegen/loops/fused_nest.shared_positions):

* column sums over the same rows (strip form) run as one pass, each updating its own strip;
* consecutive elementwise members of a fused nest whose reads of each other are at their own
  point share one inner loop (a residual add's ``dR = dX`` stored beside ``dX``);
* consecutive sibling reductions of a fused nest over the same ranges, none reading another's
  result, update their accumulators in one loop (codegen/loops/fused_nest.shared_reductions: a layer
  norm's backward sums ``H * xhat * gamma`` and ``H * gamma`` over a row in one pass).

Oracles: NumPy formulas written here, torch float64 autograd for the residual layer norm,
``ta.evaluate`` for random programs; the loop structure is read from ``ta.lower``'s program."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.program import Assign, If, Loop, Nest, Store

import tensorad as ta

TARGETS = ["", "llvm -mcpu=haswell"]


def _opts(target: str) -> dict:
    return {"target": target} if target else {}


def _loops(stmts):
    for s in stmts:
        if isinstance(s, Loop):
            yield s
            yield from _loops(s.body)
        elif isinstance(s, If):
            yield from _loops(s.then + s.orelse)


def _stored_together(lowered, names: set[str]) -> bool:
    """Whether one loop's body stores every buffer of ``names`` (one pass over the points)."""
    for step in lowered.program.steps:
        if isinstance(step, Nest):
            for loop in _loops(step.body):
                stored = {s.buffer.name for s in loop.body if isinstance(s, Store)}
                if names <= stored:
                    return True
    return False


def _nests(lowered) -> list[str]:
    return [s.name for s in lowered.program.steps if isinstance(s, Nest)]


# ---- column sums over the same rows -------------------------------------------------------------

def _column_sums(rows: int, cols: int, dtype: str = "float64"):
    H = ta.placeholder((rows, cols), dtype, "H")
    A = ta.placeholder((rows, cols), dtype, "A")
    s = ta.placeholder((rows,), dtype, "s")
    i = ta.reduce_axis((0, rows), "i")
    dg = ta.compute((cols,), lambda j: ta.sum(H[i, j] * (A[i, j] - s[i]), axis=i), "dgamma")
    i2 = ta.reduce_axis((0, rows), "i2")
    db = ta.compute((cols,), lambda j: ta.sum(H[i2, j], axis=i2), "dbeta")
    return (H, A, s), (dg, db)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("rows,cols", [(7, 13), (33, 300), (5, 1031)])
def test_sibling_column_sums_take_one_pass(target, rows, cols):
    ins, outs = _column_sums(rows, cols)
    lowered = ta.lower(list(outs), list(ins), **_opts(target))
    assert _nests(lowered) == ["dgamma+dbeta"], lowered
    assert _stored_together(lowered, {"dgamma", "dbeta"}), lowered
    # work: each sum's updates, as two nests of their own would count
    assert lowered.work == 2 * rows * cols
    rng = np.random.default_rng(rows * cols)
    h, a, s = rng.normal(size=(rows, cols)), rng.normal(size=(rows, cols)), rng.normal(size=rows)
    dg, db = ta.build(list(outs), list(ins), **_opts(target))(h, a, s)
    np.testing.assert_allclose(dg, (h * (a - s[:, None])).sum(0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(db, h.sum(0), rtol=1e-12, atol=1e-12)


def test_column_sums_of_other_rows_keep_their_passes():
    """Different row counts (other strips' loops) or nothing read in common: apart."""
    H = ta.placeholder((6, 40), "float64", "H")
    G = ta.placeholder((9, 40), "float64", "G")
    i, k = ta.reduce_axis((0, 6), "i"), ta.reduce_axis((0, 9), "k")
    a = ta.compute((40,), lambda j: ta.sum(H[i, j], axis=i), "a")
    b = ta.compute((40,), lambda j: ta.sum(G[k, j], axis=k), "b")
    lowered = ta.lower([a, b], [H, G])
    assert len(_nests(lowered)) == 2, lowered
    h, g = np.arange(240.0).reshape(6, 40), np.arange(360.0).reshape(9, 40)
    ra, rb = ta.build([a, b], [H, G])(h, g)
    np.testing.assert_array_equal(ra, h.sum(0))
    np.testing.assert_array_equal(rb, g.sum(0))


# ---- elementwise members sharing one inner loop -------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_residual_layer_norm_grads_share_the_row_pass(target):
    torch = pytest.importorskip("torch", reason="PyTorch, the oracle: an optional extra make test installs")
    n, d = 5, 37
    X, R = ta.placeholder((n, d), "float64", "X"), ta.placeholder((n, d), "float64", "R")
    g, b = ta.placeholder((d,), "float64", "gamma"), ta.placeholder((d,), "float64", "beta")
    y = ta.topi.nn.layer_norm(X + R, g, b)
    f = ta.function(y, [X, R, g, b], **_opts(target))
    lowered = f.lower_backward()
    assert _stored_together(lowered, {"X.grad", "R.grad"}), lowered
    assert _stored_together(lowered, {"gamma.grad", "beta.grad"}), lowered
    rng = np.random.default_rng(11)
    arrays = [rng.normal(size=(n, d)), rng.normal(size=(n, d)), rng.uniform(0.5, 1.5, d), rng.normal(size=d)]
    head = rng.normal(size=(n, d))
    _, res = f.forward(*arrays)
    got = f.backward(res, head)
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch.nn.functional.layer_norm(tx[0] + tx[1], (d,), tx[2], tx[3], 1e-5)
    want = torch.autograd.grad(ty, tx, torch.tensor(head))
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w.numpy(), rtol=1e-9, atol=1e-10)


def test_a_read_elsewhere_than_its_own_point_keeps_its_own_loop():
    """``C[i, j] = B[i, n - 1 - j]`` reads B where the shared loop has not been yet: C keeps a
    loop of its own after B's (and the values stay right)."""
    n, m = 4, 11
    X = ta.placeholder((n, m), "float64", "X")
    k = ta.reduce_axis((0, m), "k")
    s = ta.compute((n,), lambda i: ta.sum(X[i, k], axis=k), "s")
    B = ta.compute((n, m), lambda i, j: ta.exp(X[i, j] - s[i]), "B")
    C = ta.compute((n, m), lambda i, j: B[i, m - 1 - j] * 2.0 + B[i, j], "C")
    D = ta.compute((n, m), lambda i, j: B[i, j] * 3.0, "D")
    lowered = ta.lower([B, C, D], [X])
    assert not _stored_together(lowered, {"B", "C"}), lowered
    x = np.random.default_rng(2).normal(size=(n, m))
    b = np.exp(x - x.sum(1, keepdims=True))
    rb, rc, rd = ta.build([B, C, D], [X])(x)
    np.testing.assert_allclose(rb, b, rtol=1e-13)
    np.testing.assert_allclose(rc, b[:, ::-1] * 2.0 + b, rtol=1e-13)
    np.testing.assert_allclose(rd, 3.0 * b, rtol=1e-13)


def _elementwise(src, X, stat, prev, c, m):
    if src == "x":
        return lambda i, j: X[i, j] * c + stat[i]
    if src == "own":
        return lambda i, j: prev[i, j] * c - X[i, j]
    if src == "shift":
        return lambda i, j: prev[i, (j + 1) % m] + c
    return lambda i, j: prev[i, m - 1 - j] * X[i, j] + c


def _column_sum(r, t, weight):
    if weight is None:
        return lambda j: ta.sum(t[r, j], axis=r)
    return lambda j: ta.sum(t[r, j] * weight[r], axis=r)


@st.composite
def _siblings(draw):
    """A row statistic, then 1-4 elementwise outputs over the rows (each reading the input, the
    statistic and possibly an earlier output at its own point or at a shifted point), and 0-3
    column sums over the same rows."""
    n, m = draw(st.integers(1, 6)), draw(st.integers(1, 19))
    X = ta.placeholder((n, m), "float64", "X")
    k = ta.reduce_axis((0, m), "k")
    stat = ta.compute((n,), lambda i: ta.sum(X[i, k] * X[i, k], axis=k), "stat")
    outs = []
    for e in range(draw(st.integers(1, 4))):
        src = draw(st.sampled_from(["x"] + ["own", "shift", "flip"] * bool(outs)))
        prev = outs[-1] if outs else None
        c = draw(st.floats(-2, 2, allow_nan=False, width=32))
        outs.append(ta.compute((n, m), _elementwise(src, X, stat, prev, c, m), f"E{e}"))
    rows = [X] + outs
    for s in range(draw(st.integers(0, 3))):
        r = ta.reduce_axis((0, n), f"r{s}")
        src = draw(st.sampled_from(rows))
        w = draw(st.sampled_from(["plain", "weighted"]))
        outs.append(ta.compute((m,), _column_sum(r, src, stat if w == "weighted" else None), f"S{s}"))
    return X, outs


@settings(max_examples=25, deadline=None)
@given(_siblings(), st.sampled_from(TARGETS))
def test_random_sibling_passes_equal_evaluate(prog, target):
    X, outs = prog
    x = np.random.default_rng(X.shape[0] * 31 + X.shape[1]).normal(size=X.shape)
    got = ta.build(outs, [X], **_opts(target))(x)
    got = got if isinstance(got, tuple) else (got,)
    want = ta.evaluate(outs, {X: x})
    for t, a, w in zip(outs, got, want):
        np.testing.assert_allclose(a, w, rtol=1e-11, atol=1e-11, err_msg=t.name)


# ---- sibling reductions sharing one loop --------------------------------------------------------

def _updated_together(lowered) -> int:
    """The most accumulator updates (counted assignments) one loop's body holds directly."""
    return max((sum(isinstance(s, Assign) and s.counted for s in loop.body)
                for step in lowered.program.steps if isinstance(step, Nest) for loop in _loops(step.body)),
               default=0)


@pytest.mark.parametrize("target", TARGETS)
def test_layer_norm_backward_sums_its_row_sums_in_one_pass(target):
    torch = pytest.importorskip("torch", reason="PyTorch, the oracle: an optional extra make test installs")
    n, d = 6, 45
    X = ta.placeholder((n, d), "float64", "X")
    g, b = ta.placeholder((d,), "float64", "gamma"), ta.placeholder((d,), "float64", "beta")
    y = ta.topi.nn.layer_norm(X, g, b)
    H = ta.placeholder(y.shape, "float64", "H")
    grads = list(ta.JacobianRecursive(y, [X, g, b], H))
    lowered = ta.lower(grads, [X, g, b, H], **_opts(target))
    assert _updated_together(lowered) >= 2, lowered
    rng = np.random.default_rng(5)
    arrays = [rng.normal(size=(n, d)), rng.uniform(0.5, 1.5, d), rng.normal(size=d)]
    head = rng.normal(size=(n, d))
    got = ta.build(grads, [X, g, b, H], **_opts(target))(*arrays, head)
    tx = [torch.tensor(a, requires_grad=True) for a in arrays]
    ty = torch.nn.functional.layer_norm(tx[0], (d,), tx[1], tx[2], 1e-5)
    want = torch.autograd.grad(ty, tx, torch.tensor(head))
    for a, w in zip(got, want):
        np.testing.assert_allclose(a, w.numpy(), rtol=1e-9, atol=1e-10)


def test_a_sum_that_reads_its_sibling_keeps_its_own_loop():
    """``v[i] = sum_k X[i, k] * m[i]`` where ``m[i] = max_k X[i, k]``: v reads m's result, so it
    runs after m's loop, not in it (one pass would read a running maximum)."""
    n, d = 3, 17
    X = ta.placeholder((n, d), "float64", "X")
    k1, k2, k3 = (ta.reduce_axis((0, d), f"k{i}") for i in range(3))
    m = ta.compute((n,), lambda i: ta.max(X[i, k1], axis=k1), "m")
    s = ta.compute((n,), lambda i: ta.sum(X[i, k2] * 2.0, axis=k2), "s")
    v = ta.compute((n,), lambda i: ta.sum(X[i, k3] * m[i], axis=k3), "v")
    out = ta.compute((n,), lambda i: v[i] + s[i], "out")
    lowered = ta.lower([out], [X])
    assert _updated_together(lowered) == 2, lowered  # m and s together; v alone
    x = np.random.default_rng(3).normal(size=(n, d))
    want = x.sum(1) * x.max(1) + 2.0 * x.sum(1)
    np.testing.assert_allclose(ta.build([out], [X])(x), want, rtol=1e-12)


def _row_reduction(X, k, kind, reads, where):
    def red(i):
        x = X[i, k] * 0.5 + (reads[i] if reads is not None else 0.0)
        return getattr(ta, kind)(x, axis=k, **({} if where is None else {"where": k % 2 == 0}))
    return red


@st.composite
def _sibling_sums(draw):
    """1-4 row reductions (sum, max, min, product) of the input or of earlier ones' results,
    over equal or unequal ranges, some with a ``where``, and an elementwise output of them all."""
    n, m = draw(st.integers(1, 5)), draw(st.integers(1, 13))
    X = ta.placeholder((n, m), "float64", "X")
    reds: list = []
    for e in range(draw(st.integers(1, 4))):
        lo = draw(st.sampled_from([0, 0, 1])) if m > 1 else 0
        k = ta.reduce_axis((lo, m), f"k{e}")
        kind = draw(st.sampled_from(["sum", "max", "min", "prod"]))
        reads = draw(st.sampled_from([None] + reds))
        where = draw(st.sampled_from([None, "even"]))

        reds.append(ta.compute((n,), _row_reduction(X, k, kind, reads, where), f"R{e}"))
    return X, _total(reds)


def _total(reds):
    """The sum of every reduction's result, point by point (they all have one shape)."""
    def total(*i):
        out = reds[0][i]
        for r in reds[1:]:
            out = out + r[i]
        return out
    return ta.compute(reds[0].shape, total, "T")


def test_channel_sums_share_their_loop_a_shifted_reader_does_not():
    """Reductions with a loop around them inside the prefix (per channel ``c`` of a batch row
    ``n``): two independent channel sums share one loop over ``c``; a third whose write-back
    reads the first at ``c + 1`` -- computed later in that loop -- keeps its own."""
    n, ch, m = 2, 5, 9
    X = ta.placeholder((n, ch, m), "float64", "X")
    k1, k2, k3 = (ta.reduce_axis((0, m), f"k{i}") for i in range(3))
    a = ta.compute((n, ch), lambda i, c: ta.sum(X[i, c, k1], axis=k1), "a")
    b = ta.compute((n, ch), lambda i, c: ta.sum(X[i, c, k2] * X[i, c, k2], axis=k2), "b")
    s = ta.compute((n, ch), lambda i, c: ta.sum(X[i, c, k3] * 3.0, axis=k3) + a[i, (c + 1) % ch], "s")
    out = ta.compute((n, ch), lambda i, c: a[i, c] + b[i, c] * 2.0 + s[i, c], "out")
    lowered = ta.lower([out], [X])
    assert _updated_together(lowered) == 2, lowered
    x = np.random.default_rng(8).normal(size=(n, ch, m))
    sa, sb = x.sum(2), (x * x).sum(2)
    want = sa + 2.0 * sb + 3.0 * x.sum(2) + np.roll(sa, -1, axis=1)
    np.testing.assert_allclose(ta.build([out], [X])(x), want, rtol=1e-12)
    np.testing.assert_allclose(ta.evaluate(out, {X: x}), want, rtol=1e-12)


def _channel_reduction(X, k, kind, reads, shift):
    p = X.shape[1]

    def red(i, c):
        x = X[i, c, k] * 0.5
        if reads is not None and not shift:
            x = x + reads[i, c]
        total = getattr(ta, kind)(x, axis=k)
        return total + reads[i, (c + 1) % p] if reads is not None and shift else total
    return red


@st.composite
def _sibling_channel_sums(draw):
    """1-4 per-channel reductions of ``X[n, c, m]`` (sum, max, min), some reading an earlier
    one's result at their own channel inside the sum, or at the next channel after it."""
    n, p, m = draw(st.integers(1, 3)), draw(st.integers(1, 6)), draw(st.integers(1, 9))
    X = ta.placeholder((n, p, m), "float64", "X")
    reds: list = []
    for e in range(draw(st.integers(1, 4))):
        k = ta.reduce_axis((0, m), f"k{e}")
        kind = draw(st.sampled_from(["sum", "max", "min"]))
        reads = draw(st.sampled_from([None] + reds))
        shift = draw(st.booleans())
        reds.append(ta.compute((n, p), _channel_reduction(X, k, kind, reads, shift), f"R{e}"))

    return X, _total(reds)


@settings(max_examples=50, deadline=None)
@given(st.one_of(_sibling_sums(), _sibling_channel_sums()), st.sampled_from(TARGETS))
def test_random_sibling_reductions_equal_evaluate(prog, target):
    X, out = prog
    x = np.random.default_rng(sum(X.shape) * 17 + X.ndim).normal(size=X.shape)
    got = ta.build([out], [X], **_opts(target))(x)
    np.testing.assert_allclose(got, ta.evaluate(out, {X: x}), rtol=1e-11, atol=1e-11)
