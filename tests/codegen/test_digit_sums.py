"""Sums over a flat axis read through ``//`` and ``%`` (a tensor viewed as rows, as a hand-written group
norm spells it) run over the axis's digits, with the normalizing epilogue in the same nest."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.passes.strided_sums import split_digits
from tensorad.codegen.target import parse_target

import tensorad as ta
from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk

TARGETS = ["llvm -mcpu=skylake-avx512", "llvm -mcpu=haswell"]


def _flat_sum(c: int, h: int, w: int):
    X = ta.placeholder((4, c, h, w), "float32", "X")
    r = ta.reduce_axis((0, c * h * w), "r")
    s = ta.compute((4,), lambda n: ta.sum(X[n, r // (h * w), (r // w) % h, r % w], axis=r), name="s")
    return X, s


def test_a_flat_sum_runs_over_the_digits_of_its_axis():
    """A sum over ``r < C*H*W`` reading ``X[n, r // (H*W), (r // W) % H, r % W]`` divided its axis in
    every term of its innermost loop; it sums over three axes of extents C, H, W, reading ``X`` at them."""
    _, s = _flat_sum(8, 6, 5)
    (body,) = split_digits(s.op, s.op.body, parse_target(TARGETS[0]))
    assert [a.extent for a in body.arg.axes] == [8, 6, 5]
    assert not any(n.op in (Op.FLOORDIV, Op.MOD) for e in body.src for n in walk(e))


def test_a_flat_axis_the_divisors_do_not_tile_is_left_whole():
    """An extent the largest divisor does not divide would need a guard on the digits: the sum is kept."""
    X = ta.placeholder((50, 7), "float32", "X")
    r = ta.reduce_axis((0, 345), "r")
    s = ta.compute((1,), lambda n: ta.sum(X[r // 7, r % 7], axis=r), name="s")
    assert split_digits(s.op, s.op.body, parse_target(TARGETS[0])) == s.op.body


@pytest.mark.parametrize("target, columns, plan", [
    (TARGETS[0], 10, "microkernel"), (TARGETS[0], 128, "microkernel"),
    (TARGETS[1], 10, "split-k"), (TARGETS[1], 128, "microkernel")])
def test_a_flatten_then_dense_keeps_its_flat_sum_and_product_plan(target, columns, plan):
    """A dense layer over a flattened activation, ``sum_k X[b, k // 256, (k // 16) % 16, k % 16] * W[o, k]``,
    is a matrix product: its ``k`` stays one axis, walked whole by the product's strategy.  Split into
    digits, 10 outputs chose plain loops whose innermost loop is 16 points of a row of ``W``: the small
    CNN's forward ran 2.2x slower."""
    X = ta.placeholder((32, 16, 16, 16), "float32", "X")
    W = ta.placeholder((columns, 4096), "float32", "W")
    y = ta.topi.nn.dense(ta.topi.nn.flatten(X), W)
    tgt = replace(parse_target(target), l1d=32 << 10, l2=1 << 20, l3=32 << 20)
    low = ta.lower([y], [X, W], num_threads=1, target=tgt)
    assert low.offered[0][2] == plan
    assert low.work >= 32 * columns * 4096


@pytest.mark.parametrize("target", TARGETS)
def test_the_mean_of_a_flat_row_is_the_epilogue_of_its_collapsed_sum(target):
    """The mean divides the sum in the sum's own nest even when the sum's chosen loops collapse its last
    two axes: no stored sum, no second pass (work is the terms alone)."""
    X, s = _flat_sum(4, 16, 16)
    mean = ta.compute((4,), lambda n: s[n] / 1024.0, name="mean")
    tgt = replace(parse_target(target), l1d=32 << 10, l2=1 << 20, l3=32 << 20)
    low = ta.lower([mean], [X], num_threads=1, target=tgt)
    assert low.work == 4 * 1024
    assert [label for _, _, label in low.offered] == ["collapse", "epilogue"]


def _group_norm(X, g, b, groups: int, eps: float = 1e-5):
    n, c, hh, ww = X.shape
    per, width = c // groups, c // groups * hh * ww
    flat = ta.compute((n * groups, width), lambda r, q: X[r // groups, (r % groups) * per + q // (hh * ww),
                                                           (q // ww) % hh, q % ww], name="grouped")
    k, k2 = ta.reduce_axis((0, width), "k"), ta.reduce_axis((0, width), "k2")
    mean = ta.compute((n * groups,), lambda i: ta.sum(flat[i, k], axis=k) / width, name="mean")
    var = ta.compute((n * groups,), lambda i: ta.sum((flat[i, k2] - mean[i]) * (flat[i, k2] - mean[i]),
                                                      axis=k2) / width, name="var")
    xhat = ta.compute(flat.shape, lambda i, j: (flat[i, j] - mean[i]) / ta.sqrt(var[i] + eps), name="xhat")
    return ta.compute(X.shape, lambda a, ch, y, x: xhat[a * groups + ch // per, (ch % per) * hh * ww
                                                        + y * ww + x] * g[ch] + b[ch], name="gn")


def test_a_hand_written_group_norm_and_its_gradients_match_torch_float64():
    """The group norm spelled with a ``//``/``%`` view into rows, its forward and its gradients of X,
    gamma and beta, against PyTorch's float64 group norm."""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    rng = np.random.default_rng(0)
    shape, groups = (2, 8, 3, 5), 4
    x = rng.standard_normal(shape).astype(np.float32)
    gamma = (rng.random(8) + 0.5).astype(np.float32)
    beta = rng.standard_normal(8).astype(np.float32)
    head = rng.standard_normal(shape).astype(np.float32)
    X, g, b = (ta.placeholder(a.shape, "float32", nm) for a, nm in ((x, "X"), (gamma, "g"), (beta, "b")))
    y = _group_norm(X, g, b, groups)
    H = ta.placeholder(shape, "float32", "H")
    grads = ta.JacobianRecursive(y, [X, g, b], H)
    kernel = ta.build([y, *grads], [X, g, b, H], num_threads=1)
    got = kernel(x, gamma, beta, head)
    tx, tg, tb = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (x, gamma, beta))
    ty = torch.nn.functional.group_norm(tx, groups, tg, tb, 1e-5)
    ty.backward(torch.tensor(head, dtype=torch.float64))
    for mine, ref in zip(got, (ty, tx.grad, tg.grad, tb.grad)):
        np.testing.assert_allclose(np.asarray(mine), ref.detach().numpy(), rtol=2e-4, atol=2e-4)


def test_a_product_over_a_window_bounded_by_its_output_scans_its_flat_points():
    """``Y[i] = prod_{a <= i, b} (i + 1) X[a, b]``: the product of the other factors at each window point
    is an exclusive prefix times an exclusive suffix along the box's flat points ``t``, each read at
    ``X[t // C, t % C]``.  An ordered scan carries them in one update per point, linear in the window; the
    prefix summed over the digits of ``t`` is two reduction axes, which no ordered scan carries: a product
    over every earlier point per point, quadratic (5,656 work against 912 at n = 12, 16 x 4)."""
    import torch

    n, rows, cols = 6, 8, 4
    X = ta.placeholder((rows, cols), "float64", "X")
    a, b = ta.reduce_axis((0, rows), "a"), ta.reduce_axis((0, cols), "b")
    Y = ta.compute((n,), lambda i: ta.prod(X[a, b] * ta.cast("float64", i + 1), [a, b], where=a <= i), "Y")
    H = ta.placeholder((n,), "float64", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    # the prefix and the suffix over every point of the box, per output, and the routing over the windows
    hand = 2 * n * rows * cols + sum(min(i + 1, rows) * cols for i in range(n))
    for target in TARGETS:
        assert ta.lower([dX], [X, H], target=target).work <= hand
    x = np.random.default_rng(3).standard_normal((rows, cols))
    x[1, 2] = x[5, 0] = x[5, 3] = 0.0
    h = np.random.default_rng(4).standard_normal(n)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.stack([(xt[: min(i + 1, rows)] * (i + 1)).prod() for i in range(n)])
    yt.backward(torch.from_numpy(h))
    y, g = ta.build([Y, dX], [X, H])(x, h)
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(g, xt.grad.numpy(), rtol=1e-12, atol=1e-12)
