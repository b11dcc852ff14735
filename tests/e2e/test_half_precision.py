"""float16 and bfloat16 programs: the language's casts, evaluate vs build on every target,
gradients against float32 references, gradcheck, kernel argument checks and PyTorch.

Half tensors are storage: arithmetic and reductions run in float32 and each stored value is
rounded once (nearest, ties to even).  ``ta.evaluate`` rounds where the kernels round, so
elementwise results agree bit for bit; a reduction's float32 sum may be added in another order
by a kernel, so reductions are compared to within one unit in the last place of the half type.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk

NP = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7}  # one ulp at 1.0
TARGETS = ["llvm", "llvm -mcpu=haswell", "llvm -mattr=-f16c"]
DTYPES = ["float16", "bfloat16"]


def _data(rng, shape, dtype, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(np.float32).astype(NP[dtype])


def _ulps(got, want, dtype) -> float:
    """The largest difference in units of the half type's ulp at each wanted value."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    ulp = np.maximum(np.abs(w), 2.0**-14) * EPS[dtype]
    return float(np.max(np.abs(g - w) / ulp)) if g.size else 0.0


def test_reads_and_stores_are_explicit_printed_casts():
    X = ta.placeholder((4,), "bfloat16", "X")
    Y = ta.compute((4,), lambda i: X[i] * 2.0, "Y", dtype="bfloat16")
    body = Y.op.body[0]
    assert body.op is Op.CAST and body.dtype == "bfloat16"
    assert {n.dtype for n in walk(body) if n.op in (Op.MUL, Op.CONST)} == {"float32"}
    assert "bfloat16((float32(X(i)) * 2.000000f))" in ta.PrintTensorRecursively(Y)
    Z = ta.compute((4,), lambda i: X[i] + X[i])  # arithmetic on half reads runs in float32
    assert Z.dtype == "float32"
    k = ta.reduce_axis((0, 4), "k")
    S = ta.compute((), lambda: ta.sum(X[k], k), "S", dtype="float16")
    assert S.dtype == "float16" and S.op.body[0].op is Op.CAST  # the float32 sum is its own tensor
    R = ta.compute((), lambda: ta.max(ta.cast("bfloat16", X[k] * 3.0), k))  # a half source
    assert R.dtype == "float32" and R.op.body[0].op is Op.REDUCE  # accumulates in float32


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_layers_evaluate_vs_build(dtype, target, rng):
    topi = ta.topi
    X = ta.placeholder((6, 16), dtype, "X")
    W = ta.placeholder((10, 16), dtype, "W")
    G = ta.placeholder((10,), dtype, "G")
    B = ta.placeholder((10,), dtype, "B")
    H = topi.nn.layer_norm(topi.nn.dense(X, W), G, B)
    A = topi.nn.gelu(H)
    P = topi.nn.softmax(topi.exp(A) * 0.5)
    M = topi.max(A, axis=1)
    outs = [H, A, P, M]
    assert all(t.dtype == dtype for t in outs)  # an operator on half tensors stores half
    feed = {X: _data(rng, (6, 16), dtype), W: _data(rng, (10, 16), dtype, 0.3),
            G: _data(rng, (10,), dtype), B: _data(rng, (10,), dtype)}
    want = ta.evaluate(outs, feed)
    got = ta.build(outs, [X, W, G, B], target=target)(*feed.values())
    for g, w in zip(got, want):
        assert g.dtype == NP[dtype]
        assert _ulps(g, w, dtype) <= 1.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_against_float32_reference(dtype, rng):
    """The half program's gradients are the float32 program's to within the half type's
    rounding; adjoints are stored in the input's dtype."""
    def program(dt):
        X = ta.placeholder((8, 12), dt, "X")
        W = ta.placeholder((6, 12), dt, "W")
        L = ta.topi.sum(ta.topi.nn.gelu(ta.topi.nn.dense(X, W)) * ta.topi.nn.dense(X, W))
        return X, W, L

    x, w = _data(rng, (8, 12), dtype), _data(rng, (6, 12), dtype, 0.5)
    X, W, L = program(dtype)
    gx, gw = ta.JacobianRecursive(L, [X, W])
    assert gx.dtype == dtype and gw.dtype == dtype
    got = ta.build([gx, gw], [X, W], target="llvm -mattr=-f16c")(x, w)
    X32, W32, L32 = program("float32")
    ref = ta.evaluate(ta.JacobianRecursive(L32, [X32, W32]), {X32: x.astype(np.float32),
                                                              W32: w.astype(np.float32)})
    for g, r in zip(got, ref):
        assert g.dtype == NP[dtype]
        err = np.abs(g.astype(np.float64) - r) / (np.abs(r).max())
        assert err.max() < 8 * EPS[dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_gradcheck_runs_on_a_float64_copy(dtype):
    X = ta.placeholder((3, 4), dtype, "X")
    Y = ta.topi.sum(ta.topi.tanh(X) * ta.topi.exp(X))
    assert Y.dtype == dtype
    assert ta.gradcheck(Y, [X])


@pytest.mark.parametrize("dtype", DTYPES)
def test_rounding_at_ties_in_a_program(dtype):
    """A float32 sum exactly halfway between two half values rounds to the even one."""
    one_ulp = EPS[dtype]
    a = np.array([1.0, 1.0 + one_ulp, -1.0, 3.0, 0.0], np.float32).astype(NP[dtype])
    X = ta.placeholder(a.shape, dtype, "X")
    Y = ta.compute(a.shape, lambda i: X[i] + one_ulp / 2, "Y", dtype=dtype)
    want = np.array([1.0, 1.0 + 2 * one_ulp, -1.0 + one_ulp / 2,  # (exact: below 1 the ulp halves)
                     3.0, one_ulp / 2], np.float32).astype(NP[dtype])
    for target in TARGETS:
        got = ta.build([Y], [X], target=target)(a)
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), target
    assert np.array_equal(ta.evaluate(Y, {X: a}).view(np.uint16), want.view(np.uint16))


def test_kernel_checks_half_dtypes():
    X = ta.placeholder((4,), "bfloat16", "X")
    Y = ta.compute((4,), lambda i: X[i] * 2.0, "Y", dtype="float16")
    k = ta.build([Y], [X])
    x = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    assert k(x).dtype == np.float16 and np.array_equal(k(x), np.arange(4) * 2.0)
    with pytest.raises(TypeError, match="expected dtype bfloat16, got float16.*ml_dtypes.bfloat16"):
        k(x.astype(np.float16))
    with pytest.raises(TypeError, match="out Y: expected dtype float16, got bfloat16"):
        k(x, out=np.empty(4, ml_dtypes.bfloat16))


def test_torch_half_tensors_through_dlpack():
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    X = ta.placeholder((5,), "bfloat16", "X")
    Y = ta.compute((5,), lambda i: X[i] * 3.0, "Y", dtype="float16")
    k = ta.build([Y], [X])
    x = torch.linspace(-2, 2, 5, dtype=torch.bfloat16)
    out = torch.empty(5, dtype=torch.float16)
    k(x, out=out)  # both views, no copies
    assert torch.equal(out, (x.float() * 3).half())


@pytest.mark.parametrize("dtype", DTYPES)
def test_matches_torch_half_autograd(dtype, rng):
    """dense + layer norm + GELU + mean square in a half type, forward and backward, against
    PyTorch's CPU kernels in the same type (float32 accumulation on both sides)."""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    tdt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
    x, w = _data(rng, (8, 32), dtype), _data(rng, (16, 32), dtype, 0.2)
    g, b = _data(rng, (16,), dtype), _data(rng, (16,), dtype)
    X, W, G, B = (ta.placeholder(a.shape, dtype, n) for a, n in zip((x, w, g, b), "XWGB"))
    H = ta.topi.nn.gelu(ta.topi.nn.layer_norm(ta.topi.nn.dense(X, W), G, B))
    L = ta.topi.mean(H * H)
    grads = ta.JacobianRecursive(L, [X, W, G, B])
    got = ta.build([L, *grads], [X, W, G, B])(x, w, g, b)

    tx, tw, tg, tb = (torch.from_numpy(a.view(np.int16)).view(tdt).requires_grad_()
                      for a in (x, w, g, b))
    th = torch.nn.functional.gelu(torch.nn.functional.layer_norm(tx @ tw.T, (16,), tg, tb))
    tl = (th * th).mean()
    tl.backward()
    want = [tl] + [t.grad for t in (tx, tw, tg, tb)]
    for a, t in zip(got, want):
        r = t.detach().float().numpy()
        assert np.abs(a.astype(np.float32) - r).max() <= 4 * EPS[dtype] * max(np.abs(r).max(), 1e-3)
