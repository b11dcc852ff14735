"""``ta.function``: forward with residuals, backward that reads them, checkpoint policies.

Oracles: NumPy formulas written here (forward), float64 central finite differences of those
formulas (backward), and the exact work of loop programs counted by ``ta.lower(...).work``:
the backward of the default policy does the recomputing backward's work minus exactly the
work of the reductions it was given.
"""

from __future__ import annotations

import numpy as np
import pytest

import tensorad as ta

nn = ta.topi.nn


def _homebrew(n=3, d=6, m=5):
    """Y = exp(X W^T) / rowsum(exp(X W^T)): two forward reductions the gradient reads."""
    X, W = ta.placeholder((n, d), "float64", "X"), ta.placeholder((m, d), "float64", "W")
    dense = nn.dense(X, W)
    e = ta.topi.exp(dense)
    s = ta.topi.sum(e, axis=-1, keepdims=True)
    return ta.topi.divide(e, s), X, W, dense, s


def _homebrew_np(x, w):
    e = np.exp(x @ w.T)
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("policy", ["default", "save_all", "recompute_all", lambda t: t.name == "dense"])
def test_forward_and_backward_match_numpy_and_finite_differences(policy, rng, numeric_grad):
    Y, X, W, _, _ = _homebrew()
    f = ta.function(Y, [X, W], policy=policy)
    x, w = rng.normal(size=X.shape), rng.normal(size=W.shape) * 0.5
    h = rng.normal(size=Y.shape)
    y, res = f.forward(x, w)
    np.testing.assert_allclose(y, _homebrew_np(x, w), rtol=1e-12)
    np.testing.assert_allclose(f(x, w), y, rtol=1e-12)
    gx, gw = f.backward(res, h)
    want = numeric_grad(_homebrew_np, [x, w], h)
    np.testing.assert_allclose(gx, want[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gw, want[1], rtol=1e-6, atol=1e-8)


def test_default_saves_the_reductions_and_the_backward_does_not_recompute_them():
    Y, X, W, dense, s = _homebrew()
    saved = ta.function(Y, [X, W])
    recompute = ta.function(Y, [X, W], policy="recompute_all")
    # the row sums, and exp(dense): the forward stores it anyway (its sum and division read it),
    # so the backward loads it instead of recomputing exp from the saved dense
    (value,) = set(saved.saved) - {s}
    assert s in saved.saved and dense not in saved.saved and recompute.saved == ()
    assert value.shape == dense.shape and value.op.body[0].op is ta.Op.EXP
    reductions = ta.lower([dense, s], [X, W]).work
    assert recompute.lower_backward().work - saved.lower_backward().work >= reductions


def test_max_pool_saves_its_winner(rng):
    X = ta.placeholder((1, 2, 6, 6), "float32", "X")
    Y = nn.pool(X, 2, 2, [0, 0, 0, 0], "max")
    f = ta.function(Y, [X])
    # the maxima (the tie test's values) from the winner's pass, which finds the maximum and its ties
    # at once, and where each winner's head lands; the output is copied from those maxima
    dest, maxima = sorted(f.saved, key=lambda t: t.op.is_reduction)
    assert maxima.op is not Y.op and not dest.op.is_reduction and len(f.saved) == 2 and dest.shape == Y.shape
    assert [e.name for e in f.plan.extras] == [dest.name, maxima.name]
    # the forward: one pass over each window of 4 (the output among its values) and the destinations
    assert f.lower_forward().work == 4 * Y.size + Y.size
    # one add at each winner and one test for ties per window (one pass), no window search; the
    # routing of a tied window's share to its 4 points counts as taken (the worst case)
    assert f.lower_backward().work == Y.size + 4 * Y.size
    # recomputed: the winner's pass (4 points a window), the destinations, the adds and the routing
    assert ta.function(Y, [X], policy="recompute_all").lower_backward().work == 4 * Y.size + Y.size \
        + Y.size + 4 * Y.size
    x = rng.permutation(X.size).astype(np.float32).reshape(X.shape)  # no ties
    y, res = f.forward(x)
    np.testing.assert_array_equal(y, x.reshape(1, 2, 3, 2, 3, 2).max(axis=(3, 5)))
    (gx,) = f.backward(res, np.ones(Y.shape, np.float32))
    np.testing.assert_array_equal(gx, (x == np.repeat(np.repeat(y, 2, 2), 2, 3)).astype(np.float32))


def test_a_saved_output_is_a_residual_for_free(rng):
    """With the row sums asked for as an output, the forward computes only one extra: exp of
    the dense (:mod:`tensorad.training.saved_values`; the recompute-only policy saves the dense)."""
    Y, X, W, dense, s = _homebrew()
    f = ta.function([Y, s], [X, W])
    (extra,) = f.plan.extras
    assert extra.shape == dense.shape and extra.op.body[0].op is ta.Op.EXP
    assert ta.function([Y, s], [X, W], policy=lambda t: t is dense).plan.extras == (dense,)
    assert sorted(f.plan.sources) == [("extra", 0), ("input", 0), ("input", 1), ("output", 1)]
    x, w = rng.normal(size=X.shape), rng.normal(size=W.shape)
    (y, rowsum), res = f.forward(x, w)
    assert any(r is rowsum for r in res)
    np.testing.assert_allclose(rowsum[:, 0], np.exp(x @ w.T).sum(1), rtol=1e-12)


def test_several_outputs_sum_their_gradients_and_none_is_a_zero_head(rng, numeric_grad):
    A, B = ta.placeholder((3, 4), "float64", "A"), ta.placeholder((4, 2), "float64", "B")
    P = ta.topi.matmul(A, B)
    Q = ta.topi.sum(ta.topi.multiply(A, A), axis=1)
    f = ta.function([P, Q], [A, B])
    a, b = rng.normal(size=A.shape), rng.normal(size=B.shape)
    hp, hq = rng.normal(size=P.shape), rng.normal(size=Q.shape)
    (p, q), res = f.forward(a, b)
    np.testing.assert_allclose(p, a @ b)
    np.testing.assert_allclose(q, (a * a).sum(1))
    ga, gb = f.backward(res, hp, hq)
    np.testing.assert_allclose(ga, hp @ b.T + 2 * a * hq[:, None], rtol=1e-12)
    np.testing.assert_allclose(gb, a.T @ hp, rtol=1e-12)
    ga, gb = f.backward(res, None, hq)
    np.testing.assert_allclose(ga, 2 * a * hq[:, None], rtol=1e-12)
    np.testing.assert_array_equal(gb, np.zeros(B.shape))


def test_wrt_defaults_to_the_float_inputs_and_can_be_chosen(rng):
    X, N = ta.placeholder((5,), "float32", "X"), ta.placeholder((5,), "int32", "N")
    W = ta.placeholder((5,), "float32", "W")
    Y = ta.compute((5,), lambda i: X[i] * W[i] * ta.cast("float32", N[i]), "Y")
    assert ta.function(Y, [X, N, W]).wrt == [X, W]
    f = ta.function(Y, [X, N, W], wrt=[W])
    x, i, w = rng.normal(size=5).astype(np.float32), np.arange(5, dtype=np.int32), np.ones(5, np.float32)
    _, res = f.forward(x, i, w)
    (gw,) = f.backward(res, np.ones(5, np.float32))
    np.testing.assert_allclose(gw, x * i, rtol=1e-6)


def test_out_writes_in_place(rng):
    X = ta.placeholder((3,), "float32", "X")
    f = ta.function(ta.topi.multiply(X, X), [X])
    out = np.empty(3, np.float32)
    x = rng.normal(size=3).astype(np.float32)
    assert f(x, out=out) is out
    np.testing.assert_allclose(out, x * x)


def test_a_policy_function_decides_per_tensor():
    Y, X, W, dense, s = _homebrew()
    asked = []

    def only_dense(t):
        asked.append(t)
        return t is dense
    f = ta.function(Y, [X, W], policy=only_dense)
    assert f.saved == (dense,)
    assert dense in asked and s in asked


# ---- bad input ------------------------------------------------------------------------------

def test_errors():
    Y, X, W, _, _ = _homebrew()
    with pytest.raises(ValueError, match="policy must be one of 'default', 'save_all', 'recompute_all'"):
        ta.function(Y, [X, W], policy="everything")
    with pytest.raises(ValueError, match="read placeholder\\(s\\) W that are not among the inputs"):
        ta.function(Y, [X])
    with pytest.raises(ValueError, match="wrt tensor 'Z' is not among the inputs"):
        ta.function(Y, [X, W], wrt=[ta.placeholder((2,), "float64", "Z")])
    with pytest.raises(TypeError, match="input 'dense' is a computed tensor"):
        ta.function(Y, [X, W, nn.dense(X, W)])
    with pytest.raises(TypeError, match="unknown option 'threads'"):
        ta.function(Y, [X, W], threads=2)
    with pytest.raises(TypeError, match=r"policy\('.*'\) must return True \(save\) or False"):
        ta.function(Y, [X, W], policy=lambda t: "yes").plan  # noqa: B018
    f = ta.function(Y, [X, W])
    _, res = f.forward(np.zeros(X.shape), np.zeros(W.shape))
    with pytest.raises(ValueError, match="one head per output \\(1\\), got 2"):
        f.backward(res, np.zeros(Y.shape), np.zeros(Y.shape))
    with pytest.raises(ValueError, match="residuals must be the 4 values that forward returned"):
        f.backward(res[:1], np.zeros(Y.shape))
    with pytest.raises(TypeError, match="expected dtype float64, got float32"):
        f.backward(res, np.zeros(Y.shape, np.float32))


def test_build_only_options_reach_build_and_not_lower(rng):
    X = ta.placeholder((4,), "float32", "X")
    f = ta.function(ta.topi.exp(X), [X], cache=False, num_threads=1)
    x = rng.normal(size=4).astype(np.float32)
    np.testing.assert_allclose(f(x), np.exp(x), rtol=1e-6)
    assert f.lower_backward().work == 4
    with pytest.raises(TypeError, match="option 'name' is not accepted"):
        ta.function(ta.topi.exp(X), [X], name="mine")


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=emeraldrapids"])
def test_lowered_plans_are_those_of_the_functions_target(target):
    """``lower_forward``/``lower_backward`` show the plan the kernels are built from: the
    function's target's (register tiles differ between AVX2 and AVX-512), not the host's."""
    X = ta.placeholder((64, 96), "float32", "X")
    W = ta.placeholder((96, 80), "float32", "W")
    k = ta.reduce_axis((0, 96), "k")
    Y = ta.compute((64, 80), lambda i, j: ta.sum(X[i, k] * W[k, j], k), "Y")
    f = ta.function(Y, [X, W], target=target, num_threads=1)
    def body(lowered):  # the loops, without the signature line (its kernel name differs)
        return str(lowered).split("\n", 1)[1]

    assert body(f.lower_backward()) == body(f.backward_kernel.lowered)
    assert body(f.lower_forward()) == body(f.forward_kernel.lowered)


def test_a_scalar_loss_takes_a_python_number_or_a_0d_array_of_another_dtype_as_head():
    X = ta.placeholder((3,), "float32", "X")
    f = ta.function(ta.topi.sum(ta.topi.multiply(X, X)), [X])
    x = np.arange(3, dtype=np.float32)
    loss, res = f.forward(x)
    assert float(loss) == 5.0
    for head, scale in ((1.0, 1), (2, 2), (np.array(0.5), 0.5)):
        (g,) = f.backward(res, head)
        np.testing.assert_array_equal(g, 2 * scale * x)


def test_value_and_grad_is_the_loss_and_its_gradients_as_torch_gives_them():
    """``ta.value_and_grad(loss, params)``: one call, the loss and one gradient per parameter,
    against PyTorch float64 autograd of the same mean squared error of a dense layer."""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    X = ta.placeholder((6, 5), "float64", "X")
    W = ta.placeholder((3, 5), "float64", "W")
    B = ta.placeholder((3,), "float64", "B")
    T = ta.placeholder((6, 3), "float64", "T")
    Y = ta.topi.nn.dense(X, W, B)
    loss = ta.topi.mean(ta.topi.multiply(ta.topi.subtract(Y, T), ta.topi.subtract(Y, T)))
    step = ta.value_and_grad(loss, [W, B], [X, W, B, T])
    rng = np.random.default_rng(4)
    x, w, b, t = (rng.standard_normal(p.shape) for p in (X, W, B, T))
    value, (gw, gb) = step(x, w, b, t)
    wt, bt = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
    want = ((torch.nn.functional.linear(torch.tensor(x), wt, bt) - torch.tensor(t)) ** 2).mean()
    want.backward()
    np.testing.assert_allclose(value, want.item(), rtol=1e-12)
    np.testing.assert_allclose(gw, wt.grad.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(gb, bt.grad.numpy(), rtol=1e-12, atol=1e-14)
    assert ta.value_and_grad(loss, [W]).inputs == ta.ir.placeholders([loss])
    with pytest.raises(ValueError, match="0-d tensor"):
        ta.value_and_grad(Y, [W])
