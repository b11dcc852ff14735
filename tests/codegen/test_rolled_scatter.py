"""Long loops inside a loop that full unrolling would leave around a large body of scattering
stores stay rolled (codegen/llvm/unrolled_chains.rolled_inside_scatter).

A stride-2 convolution's input gradient interleaves its four residue-class products into rows:
``Y[i, 2 q + r, 2 p + s]``.  LLVM unrolled the 28-trip ``p`` loop and both residue loops into
the ``q`` loop around them (112 stores, each 112 elements apart along ``q``), whose accesses
its loop vectorizer then analysed and declined: 0.18 CPU-s for that nest (AMD EPYC).  With
``p`` rolled, the vectorizer takes ``p`` (the stores interleave by 2) at a quarter of the cost.
The tests read the emitted loop metadata (no timing) and check results against NumPy at every
opt level."""

import re

import numpy as np
import pytest

import tensorad as ta


def _interleave(n: int, h: int):
    A, B, C, D = (ta.placeholder((n, h, h), "float32", s) for s in "ABCD")

    def body(i, y, x):
        ye, xe = (y % 2) == 0, (x % 2) == 0
        q, p = y // 2, x // 2
        return ta.if_then_else(ye, ta.if_then_else(xe, A[i, q, p], B[i, q, p]),
                               ta.if_then_else(xe, C[i, q, p], D[i, q, p]))

    return ta.compute((n, 2 * h, 2 * h), body, name="Y"), (A, B, C, D)


def _rolled_loops(text: str) -> list[str]:
    """The loops whose back edge carries ``llvm.loop.unroll.disable``."""
    hint = r"^(!\d+) = !\{ !\"llvm.loop.unroll.disable\" \}"
    disabled = {m.group(1) for m in re.finditer(hint, text, re.M)}
    ids = {m.group(1) for m in re.finditer(r"^(!\d+) = distinct !\{ !\d+((?:, !\d+)*) \}", text, re.M)
           if set(m.group(2).replace(",", " ").split()) & disabled}
    return [m.group(1) for m in re.finditer(
        r"label %\"([\w.]+)\.body\", label %\"[\w.]+\", !llvm.loop (!\d+)", text) if m.group(2) in ids]


def _want(arrays, n, h):
    a, b, c, d = arrays
    out = np.empty((n, 2 * h, 2 * h), "float32")
    out[:, 0::2, 0::2], out[:, 0::2, 1::2], out[:, 1::2, 0::2], out[:, 1::2, 1::2] = a, b, c, d
    return out


def test_the_row_loop_of_an_interleave_stays_rolled():
    Y, ins = _interleave(2, 28)  # the row loop: 28 x 2 x 2 = 112 stores, 112 apart along ``q``
    k = ta.build([Y], list(ins), cache=False)
    assert "x.q" in _rolled_loops(k.llvm_ir_unoptimized), k.lowered.text


def test_a_small_interleave_is_left_to_llvm():
    Y, ins = _interleave(2, 8)  # 8 x 2 x 2 = 32 copies: LLVM unrolls them cheaply
    # (on AVX2: on AVX-512 the nest's split choice keeps its loops rolled, .llvm.emit.UNSWITCHED_OPT_LEVEL)
    k = ta.build([Y], list(ins), cache=False, target="llvm -mcpu=haswell")
    assert "x.q" not in _rolled_loops(k.llvm_ir_unoptimized)


@pytest.mark.parametrize("options", [{"opt_level": 0}, {"opt_level": 1}, {"opt_level": 2}, {},
                                     {"checked": True}, {"target": "llvm -mcpu=haswell"}])
def test_interleave_results(options):
    n, h = 2, 28
    Y, ins = _interleave(n, h)
    rng = np.random.default_rng(4)
    arrays = [rng.uniform(-1, 1, (n, h, h)).astype("float32") for _ in ins]
    k = ta.build([Y], list(ins), cache=False, **options)
    np.testing.assert_array_equal(k(*arrays), _want(arrays, n, h))


def test_strided_conv_gradient_matches_numpy():
    """The layer this came from: a 3 x 3 stride-2 padded convolution's input gradient."""
    X = ta.placeholder((1, 3, 56, 56), "float32", "X")
    W = ta.placeholder((4, 3, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, (2, 2), (1, 1))
    H = ta.placeholder(Y.shape, "float32", "H")
    (dX,) = ta.JacobianRecursive(Y, [X], H)
    rng = np.random.default_rng(5)
    x, w, h = (rng.uniform(-1, 1, t.shape).astype("float32") for t in (X, W, H))
    got = ta.build([dX], [X, W, H], cache=False)(x, w, h)
    want = np.zeros((1, 3, 58, 58), "float64")
    for ry in range(3):
        for rx in range(3):
            want[:, :, ry:ry + 56:2, rx:rx + 56:2] += np.einsum("nfyx,fc->ncyx", h, w[:, :, ry, rx])
    np.testing.assert_allclose(got, want[:, :, 1:57, 1:57], rtol=1e-4, atol=1e-5)
