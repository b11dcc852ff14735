"""3x3 convolutions by Winograd's transforms (``codegen.passes.winograd``).

* values of F(2x2, 3x3) and F(4x4, 3x3), forced by ``winograd=2`` / ``4``, at odd sizes, with padding
  and dilation, at 1 and 2 threads, on the host and on ``-mcpu=haswell``: the forward, a convolution the
  user writes with ``ta.compute`` (padding by ``if_then_else``, a flipped kernel), and the data gradient
  after differentiation (whose padding is the sum's condition);
* the cost model rewrites by F(4x4, 3x3) where it pays and the sum's value reaches no jump, nor a kink
  where it leaves the kernel point by point (a bare convolution, the data gradient of a conv + ReLU, a
  conv + ReLU summed into a loss), by F(2x2, 3x3) where a ReLU's output or mask follows (128 channels at
  256-bit vectors, 256 at 512-bit ones), and not at all where neither pays (a ReLU after 64 channels, a few
  tiles), on pinned targets and caches;
* F(4x4, 3x3)'s float32 error against a float64 oracle stays within a few times the direct sum's;
* the weight gradient (the taps are the output's axes) by the transpose of F(m, 3), forced and chosen, at
  odd sizes, with padding, channels not a multiple of the vector width, 1 and 2 threads, bounds checked;
* ``fastmath=False`` and ``winograd=0`` keep the direct sum.

Oracles: float64 NumPy convolutions written here, window by window.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from tensorad.codegen.passes.winograd import SMOOTH, choose_tile, kinked, match, match_taps
from tensorad.codegen.target import parse_target

import tensorad as ta

TARGETS = ("llvm", "llvm -mcpu=haswell")
PINNED = {"avx512": lambda: replace(parse_target("llvm -mcpu=skylake-avx512"), l1d=32 << 10, l2=1 << 20,
                                    l3=32 << 20),
          "avx2": lambda: replace(parse_target("llvm -mcpu=haswell"), l1d=32 << 10, l2=256 << 10, l3=8 << 20)}
#: the pinned target on which a test of values at one of TARGETS checks the cost model's choice (the
#: host's ISA and caches choose differently on other CPUs)
CHOOSES_ON = {"llvm": "avx512", "llvm -mcpu=haswell": "avx2"}


def conv(x: np.ndarray, w: np.ndarray, p: int, d: int) -> np.ndarray:
    """``Y[n, f, y, x] = sum_{c, r, q} Xp[n, c, y + d r, x + d q] W[f, c, r, q]``, ``Xp`` padded by ``p``."""
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = xp.shape[2] - 2 * d, xp.shape[3] - 2 * d
    y = np.zeros((x.shape[0], w.shape[0], oh, ow))
    for r in range(3):
        for q in range(3):
            y += np.einsum("ncyx,fc->nfyx", xp[:, :, r * d:r * d + oh, q * d:q * d + ow], w[:, :, r, q])
    return y


def input_grad(h: np.ndarray, w: np.ndarray, x_shape: tuple, p: int, d: int) -> np.ndarray:
    """dX of :func:`conv` for the head ``h``: each tap's window receives ``sum_f H[n, f] W[f, c, r, q]``."""
    n, c, hh, ww = x_shape
    oh, ow = h.shape[2:]
    dxp = np.zeros((n, c, hh + 2 * p, ww + 2 * p))
    for r in range(3):
        for q in range(3):
            dxp[:, :, r * d:r * d + oh, q * d:q * d + ow] += np.einsum("nfyx,fc->ncyx", h, w[:, :, r, q])
    return dxp[:, :, p:p + hh, p:p + ww]


def weight_grad(x: np.ndarray, h: np.ndarray, p: int, d: int) -> np.ndarray:
    """dW of :func:`conv` for the head ``h``: ``sum_{n, y, x} H[n, f, y, x] Xp[n, c, y + d r, x + d q]``."""
    xp = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    oh, ow = h.shape[2:]
    out = np.zeros((h.shape[1], x.shape[1], 3, 3))
    for r in range(3):
        for q in range(3):
            out[:, :, r, q] = np.einsum("nfyx,ncyx->fc", h, xp[:, :, r * d:r * d + oh, q * d:q * d + ow])
    return out


def _close(got: np.ndarray, want: np.ndarray) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _close_at_1_and_2_threads(kernel, arrays: list, want: np.ndarray) -> None:
    for threads in (1, 2):
        kernel.num_threads = threads
        _close(kernel(*arrays), want)


def _temporaries(lowered) -> int:
    return len(lowered.temporaries)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("shape,p,d", [((2, 16, 24, 7, 13), 1, 1), ((1, 8, 16, 11, 10), 2, 2),
                                       ((3, 16, 8, 9, 9), 0, 1), ((1, 8, 8, 13, 6), 3, 3)])
def test_forward_values(rng, target, m, shape, p, d):
    n, c, f, h, w = shape
    X, W = ta.placeholder((n, c, h, w), "float32", "X"), ta.placeholder((f, c, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, padding=p, dilation=d)
    direct = ta.lower([Y], [X, W], target=target, winograd=0)
    kernel = ta.build([Y], [X, W], target=target, winograd=m)
    assert _temporaries(kernel.lowered) > _temporaries(direct)  # the transforms' buffers
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    wt = rng.uniform(-1, 1, W.shape).astype(np.float32)
    want = conv(x.astype(np.float64), wt.astype(np.float64), p, d)
    _close_at_1_and_2_threads(kernel, [x, wt], want)


@pytest.mark.parametrize("target", TARGETS)
def test_user_written_conv_with_flipped_kernel(rng, target):
    # Written as a user writes it: the padding an if_then_else in the body, the kernel read flipped
    # (``2 - r``), so the data is read at ``y - r`` (a negative step) and the kernel transform flips back.
    n, c, f, h, w = 2, 8, 12, 9, 7
    X, W = ta.placeholder((n, c, h, w), "float32", "X"), ta.placeholder((f, c, 3, 3), "float32", "W")
    rc, r, q = ta.reduce_axis((0, c), "rc"), ta.reduce_axis((0, 3), "r"), ta.reduce_axis((0, 3), "q")

    def at(b, ch, yy, xx):
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        return ta.if_then_else(inside, X[b, ch, yy, xx], 0.0)
    Y = ta.compute((n, f, h, w), lambda b, k, y, x: ta.sum(
        at(b, rc, y + 1 - r, x + 1 - q) * W[k, rc, 2 - r, 2 - q], axis=[rc, r, q]), name="Y")
    kernel = ta.build([Y], [X, W], target=target, winograd=4)
    assert _temporaries(kernel.lowered) > _temporaries(ta.lower([Y], [X, W], target=target, winograd=0))
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    wt = rng.uniform(-1, 1, W.shape).astype(np.float32)
    _close(kernel(x, wt), conv(x.astype(np.float64), wt.astype(np.float64), 1, 1))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m", [2, 4])
@pytest.mark.parametrize("p,d", [(1, 1), (2, 2)])
def test_input_gradient_values(rng, target, m, p, d):
    # The data gradient of a stride-1 3x3 convolution is a 3x3 convolution of the head with the flipped
    # kernel; after differentiation its padding is the sum's condition, which the rewrite moves onto the data.
    n, c, f, h, w = 2, 12, 16, 11, 9
    X, W = ta.placeholder((n, c, h, w), "float32", "X"), ta.placeholder((f, c, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, padding=p, dilation=d)
    H = ta.placeholder(Y.shape, "float32", "H")
    dX, = ta.gradient(Y, [X], head=H)
    kernel = ta.build([dX], [H, W], target=target, winograd=m)
    assert _temporaries(kernel.lowered) > _temporaries(ta.lower([dX], [H, W], target=target, winograd=0))
    hh = rng.uniform(-1, 1, H.shape).astype(np.float32)
    wt = rng.uniform(-1, 1, W.shape).astype(np.float32)
    want = input_grad(hh.astype(np.float64), wt.astype(np.float64), X.shape, p, d)
    _close_at_1_and_2_threads(kernel, [hh, wt], want)


def _conv(n: int, c: int, f: int, h: int, w: int):
    X, W = ta.placeholder((n, c, h, w), "float32", "X"), ta.placeholder((f, c, 3, 3), "float32", "W")
    return ta.topi.nn.conv2d(X, W, padding=1), X, W


def _relu(Y):
    return ta.compute(Y.shape, lambda *i: ta.maximum(Y[i], 0.0), "relu")


@pytest.mark.parametrize("isa", sorted(PINNED))
def test_chosen_where_it_pays(isa):
    # 128 channels (the conv 3x3 + bias + ReLU layer at batch 32, 28x28): F(4x4, 3x3) multiplies 4 times less
    # where nothing compares the sum's value; under a ReLU F(2x2, 3x3), 2.25 times less, with the direct
    # sum's error, where its transforms cost less than they save: at 256-bit vectors, not at 512-bit ones
    # (the products twice as fast, the transforms not), there from 200 channels.
    target = PINNED[isa]()
    Y, X, W = _conv(32, 128, 128, 28, 28)
    assert choose_tile(match(Y.op, Y.op.body[0])) == 4
    assert choose_tile(match(Y.op, Y.op.body[0]), SMOOTH) == 2
    assert choose_tile(match(Y.op, Y.op.body[0]), SMOOTH, 512) is None
    wide, _, _ = _conv(8, 256, 256, 14, 14)
    assert choose_tile(match(wide.op, wide.op.body[0]), SMOOTH, 512) == 2
    direct = ta.lower([Y], [X, W], target=target, winograd=0).work
    assert ta.lower([Y], [X, W], target=target).work == ta.lower([Y], [X, W], target=target, winograd=4).work
    assert ta.lower([Y], [X, W], target=target).work < 0.4 * direct
    R = _relu(Y)
    smooth = {"avx2": 2, "avx512": 0}[isa]
    assert ta.lower([R], [X, W], target=target).work == ta.lower([R], [X, W], target=target,
                                                                 winograd=smooth).work


@pytest.mark.parametrize("isa", sorted(PINNED))
@pytest.mark.parametrize("shape", [(16, 64, 64, 16, 16), (8, 16, 16, 28, 28), (2, 128, 128, 7, 9),
                                   (8, 3, 64, 32, 32)])
def test_not_chosen_where_it_does_not_pay(isa, shape):
    # Under a ReLU, 64 channels or fewer: F(2x2, 3x3)'s transforms cost more than the multiplications they
    # save; few tiles (2 images of 7x9: 40 tiles of 2x2) leave the products per transform point too short.
    target = PINNED[isa]()
    Y, X, W = _conv(*shape)
    assert choose_tile(match(Y.op, Y.op.body[0]), SMOOTH) is None
    R = _relu(Y)
    assert ta.lower([R], [X, W], target=target).work == ta.lower([R], [X, W], target=target, winograd=0).work


@pytest.mark.parametrize("isa", sorted(PINNED))
def test_large_tile_only_where_no_kink_follows(isa):
    """F(4x4, 3x3) was chosen by cost alone for a convolution under a ReLU: its float32 error moves
    pre-activations near zero across the kink, and the mask the backward takes of them flips, moving the
    input gradient by whole terms (3e-2 of its largest value at batch 8, 64 channels, 56x56).  The forward of
    a conv + ReLU keeps the direct sum at 96 channels; its data gradient, whose value meets no kink (the mask
    reads the saved pre-activation), takes F(4x4, 3x3)."""
    target = PINNED[isa]()
    Y, X, W = _conv(16, 96, 96, 16, 16)
    R = _relu(Y)
    assert kinked([Y.op, R.op], {Y.op: Y.op.body, R.op: R.op.body}, frozenset({R})) == {Y.op}
    assert ta.lower([R], [X, W], target=target).work == ta.lower([R], [X, W], target=target, winograd=0).work
    H, P = ta.placeholder(R.shape, "float32", "H"), ta.placeholder(R.shape, "float32", "P")
    masked = ta.compute(H.shape, lambda *i: ta.if_then_else(P[i] > 0, H[i], 0.0), "masked")
    dX, = ta.gradient(Y, [X], head=masked)  # (the backward of ta.function: the mask of a saved value)
    chosen = ta.lower([dX], [W, H, P], target=target)
    assert chosen.work == ta.lower([dX], [W, H, P], target=target, winograd=4).work
    assert chosen.work < 0.6 * ta.lower([dX], [W, H, P], target=target, winograd=0).work


def _sum(T, name: str):
    axes = [ta.reduce_axis((0, n), f"k{d}") for d, n in enumerate(T.shape)]
    return ta.compute((1,), lambda _: ta.sum(T[tuple(axes)], axis=axes), name)


def test_kinks_and_jumps():
    # A ReLU (``select(v <= 0, 0, v)``: its branches agree at 0) bends a value without moving it; a mask
    # (``if_then_else(v > 0, 1, 0)``) jumps.  A value reaching a bend only matters where it leaves the
    # kernel point by point (an output, or read by one that sums nothing), where a reader may take the mask.
    Y, X, W = _conv(1, 2, 2, 5, 5)
    R = ta.topi.nn.relu(Y)
    loss = _sum(R, "loss")
    ops = [Y.op, R.op, loss.op]
    bodies = {op: op.body for op in ops}
    assert kinked(ops, bodies, frozenset({loss})) == set()
    assert kinked(ops, bodies, frozenset({loss, R})) == {Y.op}
    assert kinked(ops, bodies, frozenset({loss, Y})) == {Y.op}
    M = ta.compute(Y.shape, lambda *i: ta.if_then_else(Y[i] > 0, 1.0, 0.0), "mask")
    count = _sum(M, "count")
    ops = [Y.op, M.op, count.op]
    assert kinked(ops, {op: op.body for op in ops}, frozenset({count})) == {Y.op}


@pytest.mark.parametrize("jump", [lambda v: v // 0.5, lambda v: v % 0.5], ids=["floordiv", "mod"])
def test_a_float_floor_or_remainder_is_a_jump(jump):
    """A float ``//`` or ``%`` of a convolution's value jumps where the value crosses a multiple, so the
    value keeps the direct sum's accuracy under it; both were once taken for smooth."""
    Y, X, W = _conv(1, 2, 2, 5, 5)
    F = ta.compute(Y.shape, lambda *i: jump(Y[i]), "stepped")
    loss = _sum(F, "loss")
    ops = [Y.op, F.op, loss.op]
    assert kinked(ops, {op: op.body for op in ops}, frozenset({loss})) == {Y.op}


@pytest.mark.parametrize("isa", sorted(PINNED))
def test_large_tile_under_a_kink_of_a_loss(isa):
    """A network's forward whose output sums past its ReLUs (a loss, a pooled feature) kept the direct sum
    at 64 channels, as if the ReLU's mask were taken: a ReLU moves the value by no more than F(4x4, 3x3)'s
    error, so it takes F(4x4, 3x3) (96 channels: where it pays at 512-bit vectors too).  A mask of the value
    (a jump), a pre-activation saved for a backward (``ta.function``'s forward with residuals) or a ReLU's
    output keep the direct sum."""
    target = PINNED[isa]()
    Y, X, W = _conv(16, 96, 96, 16, 16)
    loss = ta.topi.mean(ta.topi.nn.relu(Y), axis=(2, 3))
    chosen = ta.lower([loss], [X, W], target=target).work
    assert chosen == ta.lower([loss], [X, W], target=target, winograd=4).work
    assert chosen < 0.4 * ta.lower([loss], [X, W], target=target, winograd=0).work
    M = ta.compute(Y.shape, lambda *i: ta.if_then_else(Y[i] > 0, 1.0, 0.0), "mask")
    count = ta.topi.sum(M * ta.topi.nn.relu(Y))
    assert ta.lower([count], [X, W], target=target).work == \
        ta.lower([count], [X, W], target=target, winograd=0).work
    f = ta.function(ta.topi.sum(loss), [X, W], wrt=[W], target=target)
    assert f.lower_forward().work == ta.function(ta.topi.sum(loss), [X, W], wrt=[W], target=target,
                                                 winograd=0).lower_forward().work


@pytest.mark.parametrize("target", TARGETS)
def test_chosen_under_a_kink_values(rng, target):
    # A conv + ReLU pooled over its positions, by the tile the cost model picks (F(4x4, 3x3)), at odd sizes,
    # channels not a multiple of the vector width, 1 and 2 threads, with bounds checks.
    n, c, f, h, w = 6, 131, 125, 13, 11
    Y, X, W = _conv(n, c, f, h, w)
    pooled = ta.topi.mean(ta.topi.nn.relu(Y), axis=(2, 3))
    pin = PINNED[CHOOSES_ON[target]]()
    chosen, by_f4 = (ta.lower([pooled], [X, W], target=pin, winograd=m).work for m in (None, 4))
    assert chosen == by_f4
    kernel = ta.build([pooled], [X, W], target=target, checked=True)
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    wt = rng.uniform(-1, 1, W.shape).astype(np.float32)
    want = np.maximum(conv(x.astype(np.float64), wt.astype(np.float64), 1, 1), 0).mean(axis=(2, 3))
    _close_at_1_and_2_threads(kernel, [x, wt], want)


@pytest.mark.parametrize("target", TARGETS)
def test_chosen_data_gradient_values(rng, target):
    # The data gradient of a conv + ReLU (the mask of a saved pre-activation, as ta.function's backward reads
    # it) by the tile the cost model picks, at odd sizes, channels that are not a multiple of the vector
    # width, 1 and 2 threads, with bounds checks.
    n, c, f, h, w = 6, 131, 125, 13, 11
    Y, X, W = _conv(n, c, f, h, w)
    H, P = ta.placeholder(Y.shape, "float32", "H"), ta.placeholder(Y.shape, "float32", "P")
    masked = ta.compute(H.shape, lambda *i: ta.if_then_else(P[i] > 0, H[i], 0.0), "masked")
    dX, = ta.gradient(Y, [X], head=masked)
    pin = PINNED[CHOOSES_ON[target]]()
    chosen, by_f4 = (ta.lower([dX], [W, H, P], target=pin, winograd=m).work for m in (None, 4))
    assert chosen == by_f4
    kernel = ta.build([dX], [W, H, P], target=target, checked=True)
    wt = rng.uniform(-1, 1, W.shape).astype(np.float32)
    hh = rng.uniform(-1, 1, H.shape).astype(np.float32)
    pre = rng.uniform(-1, 1, P.shape).astype(np.float32)
    want = input_grad(hh.astype(np.float64) * (pre > 0), wt.astype(np.float64), X.shape, 1, 1)
    _close_at_1_and_2_threads(kernel, [wt, hh, pre], want)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("m", [2, 4, None])
@pytest.mark.parametrize("shape,p,d", [((2, 5, 7, 9, 11), 1, 1), ((3, 6, 4, 8, 8), 0, 1),
                                       ((2, 5, 6, 11, 9), 2, 2), ((6, 131, 125, 13, 11), 1, 1)])
def test_weight_gradient_values(rng, target, m, shape, p, d):
    # The weight gradient sums over the images and the window's positions with the taps as output axes: by
    # the transpose of F(m, 3), the head's tiles zero past its last row and column (at a dilation, a set of
    # tiles per residue).  (None: the cost model's
    # tile; F(4x4, 3x3) at 131 x 125 channels, the direct sum at the small shapes.)
    n, c, f, h, w = shape
    X, W = ta.placeholder((n, c, h, w), "float32", "X"), ta.placeholder((f, c, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, padding=p, dilation=d)
    H = ta.placeholder(Y.shape, "float32", "H")
    dW, = ta.gradient(Y, [W], head=H)
    kernel = ta.build([dW], [X, H], target=target, winograd=m, checked=True)
    pin = PINNED[CHOOSES_ON[target]]()
    rewritten = _temporaries(ta.lower([dW], [X, H], target=pin, winograd=m)) > \
        _temporaries(ta.lower([dW], [X, H], target=pin, winograd=0))
    assert rewritten == (m is not None or c > 64)
    if m is not None:
        assert _temporaries(kernel.lowered) > _temporaries(ta.lower([dW], [X, H], target=target, winograd=0))
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    hh = rng.uniform(-1, 1, H.shape).astype(np.float32)
    want = weight_grad(x.astype(np.float64), hh.astype(np.float64), p, d)
    _close_at_1_and_2_threads(kernel, [x, hh], want)


def test_weight_gradient_match():
    # The taps must be output axes that the data reads beside a summed axis (y + d r); the head reads none.
    X, W = ta.placeholder((2, 8, 9, 9), "float32", "X"), ta.placeholder((8, 8, 3, 3), "float32", "W")
    for kw, want in (({"padding": 1}, True), ({"padding": 1, "dilation": 2}, True), ({"strides": 2}, False)):
        Y = ta.topi.nn.conv2d(X, W, **kw)
        dW, = ta.gradient(Y, [W], head=ta.placeholder(Y.shape, "float32", "H"))
        assert (match_taps(dW.op, dW.op.body[0]) is not None) == want, kw


def test_large_tile_error(rng):
    """F(4x4, 3x3) at points 0, +-1, +-1/2 had 8 times the direct sum's float32 error; at 0, +-1, 2, -1/2
    with B^T's rows scaled to 1 it has under 4 times (float64 oracle, 64 channels in and out)."""
    Y, X, W = _conv(4, 64, 64, 16, 16)
    x = rng.uniform(-1, 1, X.shape).astype(np.float32)
    wt = rng.uniform(-1, 1, W.shape).astype(np.float32)
    want = conv(x.astype(np.float64), wt.astype(np.float64), 1, 1)

    def error(tile: int) -> float:
        return float(np.abs(ta.build([Y], [X, W], winograd=tile)(x, wt) - want).max() / np.abs(want).max())
    assert error(4) < 5 * max(error(0), 1e-7)


def test_exact_order_keeps_the_direct_sum():
    # fastmath=False adds in the program's order: the transforms would add in another.
    Y, X, W = _conv(16, 64, 64, 16, 16)
    exact = ta.lower([Y], [X, W], fastmath=False)
    assert exact.work == ta.lower([Y], [X, W], fastmath=False, winograd=4).work
    assert _temporaries(exact) == _temporaries(ta.lower([Y], [X, W], fastmath=False, winograd=0))


def test_strided_and_grouped_are_not_matched():
    X, W = ta.placeholder((2, 8, 9, 9), "float32", "X"), ta.placeholder((8, 8, 3, 3), "float32", "W")
    strided = ta.topi.nn.conv2d(X, W, strides=2, padding=1)
    grouped = ta.topi.nn.conv2d(X, ta.placeholder((8, 4, 3, 3), "float32", "G"), padding=1, groups=2)
    five = ta.topi.nn.conv2d(X, ta.placeholder((8, 8, 5, 5), "float32", "F"), padding=2)
    upsampled = ta.topi.nn.conv2d_transpose(X, W, 3, 0)  # (reads X at (y - r) // 3: parity's)
    for t in (strided, grouped, five, upsampled):
        assert match(t.op, t.op.body[0]) is None


@pytest.mark.parametrize("bad", [3, True, 1, "4"])
def test_option_is_checked(bad):
    Y, X, W = _conv(1, 4, 4, 5, 5)
    with pytest.raises(ValueError, match="winograd"):
        ta.lower([Y], [X, W], winograd=bad)


def test_transforms_priced_by_the_vector_width():
    """At 512-bit vectors the products run twice the multiply-adds per cycle of 256-bit ones while the
    transforms take about the same time per value, so a ResNet basic block's 3x3 convolution (64 channels,
    16 images of 16x16) keeps the direct sum there: F(4x4, 3x3) had taken 1.12x its forward time and 1.19x
    its training step's backward on an AVX-512 Xeon (0.69x on AVX2 code, where it stays chosen)."""
    Y, X, W = _conv(16, 64, 64, 16, 16)
    conv = match(Y.op, Y.op.body[0])
    assert choose_tile(conv, vector_bits=256) == 4 and choose_tile(conv, vector_bits=512) is None
    for isa, tile in (("avx512", 0), ("avx2", 4)):
        target = PINNED[isa]()
        assert ta.lower([Y], [X, W], target=target).work == ta.lower([Y], [X, W], target=target,
                                                                     winograd=tile).work
