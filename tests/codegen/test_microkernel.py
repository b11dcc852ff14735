"""The packed vector micro-kernel for matmul-like contractions: every layout, edge and block."""

import re
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tensorad.codegen.target import parse_target

import tensorad as ta

RNG = np.random.default_rng(7)
# Targets for assertions about the cost model's choices, with their caches given: a target that
# can run here takes the host's caches, and the host's vector width decides which strategies
# are offered (a residue class shorter than a vector is not split off), so an assertion about a
# choice made for the host holds on some CPUs only.
PINNED = {"avx2": lambda: replace(parse_target("llvm -mcpu=znver3"), l1d=32 << 10, l2=512 << 10, l3=32 << 20),
          "avx512": lambda: replace(parse_target("llvm -mcpu=skylake-avx512"), l1d=32 << 10, l2=1 << 20,
                                    l3=32 << 20)}

LAYOUTS = {
    "A[i,k]*B[k,j]": (lambda n, k, m: ((n, k), (k, m)), lambda A, B, i, j, k: A[i, k] * B[k, j],
                      lambda a, b: a @ b),
    "X[i,k]*W[j,k]": (lambda n, k, m: ((n, k), (m, k)), lambda A, B, i, j, k: A[i, k] * B[j, k],
                      lambda a, b: a @ b.T),
    "A[k,i]*B[k,j]": (lambda n, k, m: ((k, n), (k, m)), lambda A, B, i, j, k: A[k, i] * B[k, j],
                      lambda a, b: a.T @ b),
    "B[j,k]*A[k,i] (operands swapped)": (lambda n, k, m: ((k, n), (m, k)),
                                         lambda A, B, i, j, k: B[j, k] * A[k, i], lambda a, b: a.T @ b.T),
}


def _build(layout, n, kk, m, dtype, **opts):
    shapes, body, ref = LAYOUTS[layout]
    sa, sb = shapes(n, kk, m)
    A, B = ta.placeholder(sa, dtype, "A"), ta.placeholder(sb, dtype, "B")
    k = ta.reduce_axis((0, kk), "k")
    C = ta.compute((n, m), lambda i, j: ta.sum(body(A, B, i, j, k), k), name="C")
    a, b = RNG.standard_normal(sa).astype(dtype), RNG.standard_normal(sb).astype(dtype)
    return ta.lower([C], [A, B], **opts), ta.build([C], [A, B], parallel_min_work=0, **opts), a, b, ref


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layouts_and_edges(layout, dtype):
    # small blocks (MR=8, NR=2 vectors, KC=16, MC=16) so that every block loop has a partial
    # last block: 37 rows, 45 columns, 39-long reduction
    vw = 16 if dtype == "float32" else 8
    f, kern, a, b, ref = _build(layout, 37, 39, 45, dtype, microkernel=True, tile=(8, 2 * vw, 16, 16))
    assert "micro-kernel" in str(f)
    assert f.work == 37 * 39 * 45
    want = ref(a.astype(np.float64), b.astype(np.float64))
    tol = 1e-4 if dtype == "float32" else 1e-12
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(a, b), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 300, 1), (8, 1, 32), (65, 70, 130)])
def test_default_blocks(shape):
    n, kk, m = shape
    _, kern, a, b, ref = _build("X[i,k]*W[j,k]", n, kk, m, "float32", microkernel=True)
    np.testing.assert_allclose(kern(a, b), ref(a.astype(np.float64), b), rtol=1e-4, atol=1e-4)


def test_output_is_overwritten_not_accumulated():
    _, kern, a, b, ref = _build("A[i,k]*B[k,j]", 20, 40, 33, "float32", microkernel=True)
    out = np.full((20, 33), 1e6, np.float32)
    kern(a, b, out=out)
    np.testing.assert_allclose(out, ref(a.astype(np.float64), b), rtol=1e-4, atol=1e-4)


def test_strict_mode_and_small_sizes_use_plain_loops():
    f, *_ = _build("A[i,k]*B[k,j]", 70, 70, 70, "float32", fastmath=False)
    assert "micro-kernel" not in str(f)
    f, *_ = _build("A[i,k]*B[k,j]", 8, 8, 8, "float32")
    assert "micro-kernel" not in str(f)
    f, *_ = _build("A[i,k]*B[k,j]", 70, 70, 70, "float32")
    assert "micro-kernel" in str(f)


def test_bad_tile_option():
    with pytest.raises(ValueError, match="tile"):
        _build("A[i,k]*B[k,j]", 70, 70, 70, "float32", microkernel=True, tile=(8, 20, 16, 16))


# ---- general contractions: batches, several axes per group, guards, gradients ------------------

def _check_against_evaluate(outputs, inputs, feed, tol, **opts):
    kern = ta.build(outputs, inputs, microkernel=True, parallel_min_work=0, **opts)
    text = str(ta.lower(outputs, inputs, microkernel=True, **opts))
    want = ta.evaluate(outputs, feed)
    for threads in (1, 2):
        kern.num_threads = threads
        got = kern(*[feed[p] for p in inputs])
        got = got if isinstance(got, tuple) else (got,)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return text


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_batched_matmul(dtype):
    A = ta.placeholder((3, 17, 20), dtype, "A")
    B = ta.placeholder((3, 20, 35), dtype, "B")
    k = ta.reduce_axis((0, 20), "k")
    C = ta.compute((3, 17, 35), lambda b, i, j: ta.sum(A[b, i, k] * B[b, k, j], k), name="C")
    feed = {A: RNG.standard_normal((3, 17, 20)).astype(dtype),
            B: RNG.standard_normal((3, 20, 35)).astype(dtype)}
    text = _check_against_evaluate([C], [A, B], feed, 1e-4 if dtype == "float32" else 1e-12)
    assert "batch 3 of [17 x 20] @ [20 x 35]" in text


@pytest.mark.parametrize("batch,cols,col_blocks", [(8, 64, (1,)), (5, 64, (2,)), (1, 256, (3, 4))])
def test_batched_product_cuts_its_columns_only_as_the_parallel_loop_needs(batch, cols, col_blocks):
    # each column block packs side A again: with 8 batch points there is parallel work enough
    # without cutting 64 columns (attention's dS @ K), 5 get 2 blocks each (10: even), one
    # batch point gets 4 (3 when NR-panel multiples make 4 cover the columns)
    import re

    A = ta.placeholder((batch, 40, 48), "float32", "A")
    B = ta.placeholder((batch, 48, cols), "float32", "B")
    k = ta.reduce_axis((0, 48), "k")
    C = ta.compute((batch, 40, cols), lambda b, i, j: ta.sum(A[b, i, k] * B[b, k, j], k), name="C")
    feed = {A: RNG.standard_normal(A.shape).astype(np.float32),
            B: RNG.standard_normal(B.shape).astype(np.float32)}
    text = _check_against_evaluate([C], [A, B], feed, 1e-4)
    nr, nc = (int(x) for x in re.search(r"\d+x(\d+) vector micro-kernel \(KC=\d+ MC=\d+ NC=(\d+)\)",
                                        text).groups())
    assert -(-cols // nc) in col_blocks and nc % nr == 0, text


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("batch", [(), (3,)])
def test_column_blocks_with_a_partial_last_panel_at_any_thread_count(target, batch):
    """A product whose column blocks end in a partial panel: every column of C, with a ReLU
    epilogue applied per finished block and B packed once per call when batch points share
    it, at 1-3 threads."""
    from tensorad.codegen.target import host_target, parse_target

    if not parse_target(target).runs_here(host_target()):
        target = "llvm"  # (a CPU without AVX2: its own tiles, checked the same way)
    n = 1000  # (20.8 panels of 48, 41.7 of 24: uneven blocks either way)
    A = ta.placeholder(batch + (21, 40), "float32", "A")
    B = ta.placeholder((40, n), "float32", "B")
    k = ta.reduce_axis((0, 40), "k")
    S = ta.compute(batch + (21, n), lambda *ax: ta.sum(A[ax[:-1] + (k,)] * B[k, ax[-1]], k), name="S")
    C = ta.compute(S.shape, lambda *ax: ta.maximum(S[ax], 0.0), name="C")
    kern = ta.build([C], [A, B], target=target, parallel_min_work=0)
    assert "micro-kernel" in str(kern.lowered) and "epilogue" in str(kern.lowered), kern.lowered
    a = RNG.standard_normal(A.shape).astype(np.float32)
    b = RNG.standard_normal(B.shape).astype(np.float32)
    want = np.maximum(a.astype(np.float64) @ b, 0)
    for threads in (1, 2, 3):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(a, b), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("nr", [8, 16, 24, 32, 48])
@pytest.mark.parametrize("batches", [1, 3])
def test_column_blocks_share_out_the_panels_evenly(nr, batches):
    """The driver's column blocks (the parallel loop's work) cover the columns once, in order, none wider
    than ``NC``, and differ by one panel at most: 1000 columns of 48-wide panels are 5 + 5 + 5 + 6 panels,
    not 6 + 6 + 6 + 3 (two threads then share 11 : 10, not 12 : 9)."""
    from tensorad.codegen.gemm.contraction import column_block
    from tensorad.codegen.gemm.library import column_span

    for n in list(range(1, 200)) + [250, 512, 1000, 1001, 2049, 4096, 4097, 10000]:
        nc = column_block(n, batches, nr)
        blocks = -(-n // nc)
        spans = [column_span(jb, blocks, n, nr) for jb in range(blocks)]
        assert [s[0] for s in spans] == [0] + [s[0] + s[1] for s in spans[:-1]], (n, spans)
        assert sum(s[1] for s in spans) == n and all(0 < s[1] <= nc for s in spans), (n, nc, spans)
        assert all(s[0] % nr == 0 for s in spans)
        panels = [-(-s[1] // nr) for s in spans]
        assert max(panels) - min(panels) <= 1, (n, nc, spans)


def test_side_a_that_reads_no_batch_axis_is_packed_once_per_call():
    # every column block (and batch point) reads the same A: the library packs it once per
    # call instead of once per block; correct with partial row, depth and column blocks
    from tensorad.codegen.gemm.contraction import match_contraction
    from tensorad.codegen.gemm.microkernel import packs_a_once

    def spec(a_shape, a_read, batch=()):
        A = ta.placeholder(a_shape, "float32", "A")
        B = ta.placeholder(batch + (39, 45), "float32", "B")
        k = ta.reduce_axis((0, 39), "k")
        C = ta.compute(batch + (37, 45), lambda *ax: ta.sum(a_read(A, ax, k) * B[ax[:-2] + (k, ax[-1])], k),
                       name="C")
        return match_contraction(C.op, C.op.body), A, B, C

    unbatched, A, B, C = spec((39, 37), lambda A, ax, k: A[k, ax[-2]])
    assert packs_a_once(unbatched)
    assert packs_a_once(spec((37, 39), lambda A, ax, k: A[ax[-2], k], (3,))[0])  # shared weights
    assert not packs_a_once(spec((3, 37, 39), lambda A, ax, k: A[ax[0], ax[-2], k], (3,))[0])
    feed = {A: RNG.standard_normal(A.shape).astype(np.float32),
            B: RNG.standard_normal(B.shape).astype(np.float32)}
    for tile in ((8, 16, 16, 16), None):
        _check_against_evaluate([C], [A, B], feed, 1e-4, **({"tile": tile} if tile else {}))


def test_conv2d_forward_with_padding_and_stride():
    X = ta.placeholder((2, 5, 13, 11), "float32", "X")
    W = ta.placeholder((7, 5, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, (2, 1), (1, 2))
    feed = {X: RNG.standard_normal((2, 5, 13, 11)).astype(np.float32),
            W: RNG.standard_normal((7, 5, 3, 3)).astype(np.float32)}
    text = _check_against_evaluate([Y], [X, W], feed, 1e-4, tile=(8, 32, 16, 16))
    assert "matrix product" in text


def test_conv2d_gradients():
    X = ta.placeholder((2, 3, 9, 10), "float64", "X")
    W = ta.placeholder((4, 3, 3, 3), "float64", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 0)
    H = ta.placeholder(Y.shape, "float64", "H")
    gx, gw = ta.JacobianRecursive(Y, [X, W], H)
    feed = {X: RNG.standard_normal((2, 3, 9, 10)), W: RNG.standard_normal((4, 3, 3, 3)),
            H: RNG.standard_normal(Y.shape)}
    text = _check_against_evaluate([gx, gw], [X, W, H], feed, 1e-11, tile=(8, 16, 16, 16))
    assert text.count("matrix product") == 2


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-11), ("float32", 1e-4)])
def test_conv2d_relu_gradients_stay_matrix_products(dtype, tol):
    # The ReLU's mask (H * select(Y <= 0, 0, 1) * W: relu'(0) = 0) sits inside the sums; it is
    # a condition of the side that reads the same point (the head), so both gradients stay
    # matrix products and the masked head is copied once, zero-padded, for the input gradient.
    X = ta.placeholder((2, 8, 16, 16), dtype, "X")
    W = ta.placeholder((16, 8, 3, 3), dtype, "W")
    C = ta.topi.nn.conv2d(X, W, 1, 1)
    Y = ta.topi.nn.relu(C)
    H = ta.placeholder(Y.shape, dtype, "H")
    gx, gw = ta.JacobianRecursive(Y, [X, W], H)
    x, w = RNG.standard_normal(X.shape).astype(dtype), RNG.standard_normal(W.shape).astype(dtype)
    x[0, :, :6, :6] = 0.0  # the convolution is exactly 0 there: ties at the kink
    h = RNG.standard_normal(Y.shape).astype(dtype)
    want = ta.evaluate([gx, gw], {X: x, W: w, H: h})
    inputs = [X, W, H, C]  # the forward's saved convolution is an input, as in training
    c = ta.build([C], [X, W])(x, w)
    kern = ta.build([gx, gw], inputs, microkernel=True, parallel_min_work=0)
    for threads in (1, 2):
        kern.num_threads = threads
        for g, ref in zip(kern(x, w, h, c), want):
            np.testing.assert_allclose(g, ref, rtol=tol, atol=tol)
    text = str(ta.lower([gx, gw], inputs, microkernel=True))
    sums = [line for line in text.splitlines() if "# nest" in line and "sum over" in line]
    assert {line.split()[2].split(":")[0] for line in sums} >= {"X.grad", "W.grad"}
    assert all("matrix product" in line for line in sums), sums
    stores = [line for line in text.splitlines() if "] = " in line]
    # the masked head, computed once (:mod:`tensorad.codegen.passes.shared_windows`): select(conv2d[..]
    # <= 0, 0, H[..]) (the zero branch of the derivative's select is a strong zero: the head
    # goes inside it), then copied zero-padded for the input gradient's windows
    masked = [line.split("[")[0].strip() for line in stores
              if "conv2d[" in line and "<= 0" in line and "H[" in line]
    assert len(masked) == 1, stores
    assert any(".padded" in line.split("=")[0] and masked[0] + "[" in line.split("=")[1]
               for line in stores), stores


@pytest.mark.parametrize("stride,padding,size,relu", [(2, 1, (13, 11), True), (2, 0, (12, 12), False),
                                                      (3, 1, (14, 10), False), ((2, 1), 1, (9, 12), True)])
def test_strided_convolution_input_gradient_is_one_product_per_residue_class(stride, padding, size, relu):
    # dX of a stride-s convolution tests y % s inside its sum; each residue class of (y, x) is a
    # stride-1 convolution with a sub-kernel: a matrix product as long as its real taps
    X = ta.placeholder((2, 8) + size, "float64", "X")
    W = ta.placeholder((16, 8, 3, 3), "float64", "W")
    C = ta.topi.nn.conv2d(X, W, stride, padding)
    Y = ta.topi.nn.relu(C) if relu else C
    H = ta.placeholder(Y.shape, "float64", "H")
    (gx,) = ta.JacobianRecursive(Y, [X], H)
    x, w = RNG.standard_normal(X.shape), RNG.standard_normal(W.shape)
    h = RNG.standard_normal(Y.shape)
    want = ta.evaluate([gx], {X: x, W: w, H: h})[0]
    inputs = [X, W, H, C] if relu else [X, W, H]
    args = [x, w, h] + ([ta.build([C], [X, W])(x, w)] if relu else [])
    kern = ta.build([gx], inputs, microkernel=True, parallel_min_work=0)
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(*args), want, rtol=1e-11, atol=1e-11)
    strides = stride if isinstance(stride, tuple) else (stride, stride)
    for make in PINNED.values():
        target = make()
        lowered = ta.lower([gx], inputs, microkernel=True, target=target)
        sums = [line for line in str(lowered).splitlines() if "# nest" in line and "sum over" in line]
        assert len(sums) == strides[0] * strides[1] and all("matrix product" in line for line in sums), sums
        # no padded taps: as much work as the plain loops, which run every tap once (pinned: an
        # AVX2 target would take residue classes with their taps unrolled, fewer, longer bodies)
        # (the products' work less what their packing computes: the masked head at each tap)
        whole = {point: "loops" for point, _, _ in lowered.offered if "/" not in point}
        plain = ta.lower([gx], inputs, microkernel=False, target=target, choices=whole)
        packing = sum(int(n) for n in re.findall(r"its packing computes (\d+) values", str(lowered)))
        assert lowered.work - packing <= 1.1 * plain.work


@pytest.mark.parametrize("stride,padding,dilation", [(2, 1, 1), (1, 1, 1), (2, 0, 1), (1, 2, 2)])
def test_relu_masked_sides_are_copied_by_selects_not_branches(stride, padding, dilation):
    # The ReLU mask of a convolution's head is a data test taken about half the time: packers
    # and copies evaluate it as a select (no branch to mispredict); the masked head is
    # computed once instead of being tested at every packing; the range
    # tests that a residue class's narrowed taps make always true are dropped (its kernel
    # side is then a plain read)
    X = ta.placeholder((2, 16, 29, 27), "float64", "X")  # products worth the micro-kernel
    W = ta.placeholder((32, 16, 3, 3), "float64", "W")
    C = ta.topi.nn.conv2d(X, W, stride, padding, dilation)
    Y = ta.topi.nn.relu(C)
    H = ta.placeholder(Y.shape, "float64", "H")
    gx, gw = ta.JacobianRecursive(Y, [X, W], H)
    x, w, h = (RNG.standard_normal(t.shape) for t in (X, W, H))
    x[0, :, :4, :4] = 0.0  # ties at the kink: relu'(0) = 0
    want = ta.evaluate([gx, gw], {X: x, W: w, H: h})
    inputs = [X, W, H, C]
    args = [x, w, h, ta.build([C], [X, W])(x, w)]
    kern = ta.build([gx, gw], inputs, microkernel=True, parallel_min_work=0)
    for threads in (1, 2):
        kern.num_threads = threads
        for g, ref in zip(kern(*args), want):
            np.testing.assert_allclose(g, ref, rtol=1e-11, atol=1e-11)
    text = str(ta.lower([gx, gw], inputs, microkernel=True))
    masks = [line for line in text.splitlines() if "] = " in line and "conv2d[" in line]
    assert masks and all("select(" in line and "if_then_else(" not in line for line in masks), masks
    assert f"float64[{', '.join(map(str, Y.shape))}]" in "".join(  # (the masked head, computed once)
        line for line in text.splitlines() if line.strip().startswith("allocate")
        and (".padded" in line or ".operand" in line))
    if stride == 2:  # the kernel side of each residue class is a plain read: no guarded packing
        from tensorad.codegen.gemm.contraction import match_contraction
        from tensorad.codegen.passes.buffers import inline_bodies
        from tensorad.codegen.strategies.parity import decompose

        op = gx.op
        body = inline_bodies(op, set(), {X, W, H, C})[0]
        pieces, specs, _ = decompose(op, body, lambda p: match_contraction(p, p.body))
        assert all(spec.a.op is ta.ir.expr.Op.READ or spec.b.op is ta.ir.expr.Op.READ for spec in specs)


def test_guarded_triangular_contraction_and_extra_factors():
    n = 37
    A = ta.placeholder((n, n), "float32", "A")
    B = ta.placeholder((n, 45), "float32", "B")
    s = ta.placeholder((n,), "float32", "s")
    k = ta.reduce_axis((0, n), "k")
    C = ta.compute((n, 45), lambda i, j: ta.sum(2.0 * A[i, k] * s[k] * B[k, j], k, where=k <= i),
                   name="C")
    feed = {A: RNG.standard_normal((n, n)).astype(np.float32),
            B: RNG.standard_normal((n, 45)).astype(np.float32),
            s: RNG.standard_normal(n).astype(np.float32)}
    text = _check_against_evaluate([C], [A, B, s], feed, 1e-4, tile=(8, 32, 16, 16))
    assert "matrix product" in text
    assert ta.lower([C], [A, B, s]).work == 45 * n * (n + 1) // 2


def test_non_contractions_are_left_alone():
    A = ta.placeholder((20, 20), "float32", "A")
    k = ta.reduce_axis((0, 20), "k")
    # the condition ties m (i) to n (j): not a product of two independent sides
    C = ta.compute((20, 20), lambda i, j: ta.sum(A[i, k] * A[k, j], k, where=k < i + j), name="C")
    M = ta.compute((20, 20), lambda i, j: ta.max(A[i, k] * A[k, j], k), name="M")
    text = str(ta.lower([C, M], [A], microkernel=True))
    assert "matrix product" not in text


def test_side_kept_in_bounds_only_by_the_other_sides_condition_is_not_packed():
    # X has 10 columns, k runs to 20: X[i, k] is in bounds only because k < j (j < 10)
    X = ta.placeholder((30, 10), "float32", "X")
    Y = ta.placeholder((20, 10), "float32", "Y")
    k = ta.reduce_axis((0, 20), "k")
    C = ta.compute((30, 10), lambda i, j: ta.sum(X[i, k] * Y[k, j], k, where=k < j), name="C")
    assert "matrix product" not in str(ta.lower([C], [X, Y], microkernel=True))
    x = RNG.standard_normal((30, 10)).astype(np.float32)
    y = RNG.standard_normal((20, 10)).astype(np.float32)
    want = np.array([[sum(x[i, q] * y[q, j] for q in range(j)) for j in range(10)] for i in range(30)])
    np.testing.assert_allclose(ta.build([C], [X, Y], microkernel=True)(x, y), want, rtol=1e-5, atol=1e-5)


# ---- the generic library: which packing routine each side gets, and that each is exact ---------

PACK_CASES = {
    # name: (A shape, B shape, body, reference, expected library routines)
    "transpose both": ((37, 39), (45, 39), lambda A, B, i, j, k: A[i, k] * B[j, k],
                       lambda a, b: a @ b.T, ("packA_transpose", "packB_transpose")),
    "transpose A, copy B": ((37, 39), (39, 45), lambda A, B, i, j, k: A[i, k] * B[k, j],
                            lambda a, b: a @ b, ("packA_transpose", "packB_copy")),
    "copy both": ((39, 37), (39, 45), lambda A, B, i, j, k: A[k, i] * B[k, j],
                  lambda a, b: a.T @ b, ("packA_copy", "packB_copy")),
    "strided gathers": ((2 * 37, 3 * 39), (2 * 39, 3 * 45),
                        lambda A, B, i, j, k: A[2 * i, 3 * k] * B[2 * k, 3 * j],
                        lambda a, b: a[::2, ::3] @ b[::2, ::3], ("packA_gather", "packB_gather")),
    "reversed k": ((37, 39), (39, 45), lambda A, B, i, j, k: A[i, 38 - k] * B[38 - k, j],
                   lambda a, b: a @ b, ("packA_gather", "packB_copy")),
}


@pytest.mark.parametrize("name", sorted(PACK_CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_library_packing_routines(name, dtype):
    sa, sb, body, ref, routines = PACK_CASES[name]
    A, B = ta.placeholder(sa, dtype, "A"), ta.placeholder(sb, dtype, "B")
    k = ta.reduce_axis((0, 39), "k")
    C = ta.compute((37, 45), lambda i, j: ta.sum(body(A, B, i, j, k), k), name="C")
    vw = 16 if dtype == "float32" else 8
    kern = ta.build([C], [A, B], microkernel=True, parallel_min_work=0, tile=(8, 2 * vw, 16, 16))
    text = kern.compiled.llvm_ir_unoptimized
    for r in routines:
        assert r in text, (r, name)
    assert "shufflevector" not in text and '_packA"' not in text  # no packing code in the kernel
    a, b = RNG.standard_normal(sa).astype(dtype), RNG.standard_normal(sb).astype(dtype)
    tol = 1e-4 if dtype == "float32" else 1e-12
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(a, b), ref(a.astype(np.float64), b), rtol=tol, atol=tol)


def test_padded_convolution_side_is_range_checked_by_the_library():
    # the padding guard of X is exactly the range of its indices: the library's checked copy
    X = ta.placeholder((2, 3, 9, 21), "float32", "X")
    W = ta.placeholder((5, 3, 3, 3), "float32", "W")
    Y = ta.topi.nn.conv2d(X, W, 1, 1)
    kern = ta.build([Y], [X, W], microkernel=True, parallel_min_work=0, tile=(8, 32, 16, 16))
    assert "packB_copy" in kern.compiled.llvm_ir_unoptimized
    x = RNG.standard_normal((2, 3, 9, 21)).astype(np.float32)
    w = RNG.standard_normal((5, 3, 3, 3)).astype(np.float32)
    want = ta.evaluate([Y], {X: x, W: w})[0]
    np.testing.assert_allclose(kern(x, w), want, rtol=1e-4, atol=1e-4)


def test_side_that_is_not_a_linear_read_gets_its_own_packer():
    # A * s is computed, contiguous along k: the kernel's row function, staged by the library's packer
    A = ta.placeholder((37, 39), "float32", "A")
    B = ta.placeholder((39, 45), "float32", "B")
    s = ta.placeholder((39,), "float32", "s")
    k = ta.reduce_axis((0, 39), "k")
    C = ta.compute((37, 45), lambda i, j: ta.sum(A[i, k] * s[k] * B[k, j], k), name="C")
    kern = ta.build([C], [A, B, s], microkernel=True, tile=(8, 32, 16, 16))
    text = kern.compiled.llvm_ir_unoptimized
    assert '_packA_row"' in text and "packA_staged" in text
    assert "packB_copy" in text and '_packB"' not in text and '_packB_row' not in text
    a, b, sv = (RNG.standard_normal(x).astype(np.float32) for x in ((37, 39), (39, 45), (39,)))
    np.testing.assert_allclose(kern(a, b, sv), (a * sv) @ b, rtol=1e-4, atol=1e-4)


@st.composite
def _contraction(draw):
    """A random (batched, multi-axis, permuted, offset, possibly padded) matrix product."""
    ext = st.integers(1, 6)
    nb = draw(st.integers(0, 1))
    shape_b = [draw(ext) for _ in range(nb)]
    m = draw(st.integers(1, 11))
    ns = [draw(st.integers(1, 9)) for _ in range(draw(st.integers(1, 2)))]
    ks = [draw(ext) for _ in range(draw(st.integers(1, 2)))]
    pad = draw(st.booleans())
    off_a, off_b = draw(st.integers(0, 2)), draw(st.integers(0, 2))
    perm_a = draw(st.permutations(range(nb + 1 + len(ks))))
    perm_b = draw(st.permutations(range(nb + len(ks) + len(ns))))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    return nb, shape_b, m, ns, ks, pad, off_a, off_b, perm_a, perm_b, dtype


@settings(max_examples=40, deadline=None, derandomize=True)
@given(_contraction())
def test_random_contractions_through_the_library(case):
    nb, shape_b, m, ns, ks, pad, off_a, off_b, perm_a, perm_b, dtype = case
    dims_a = shape_b + [m] + ks
    dims_b = shape_b + ks + ns
    dims_b_store = list(dims_b)
    dims_b_store[-1] = ns[-1] if pad else ns[-1] + ks[-1] - 1  # padded: a convolution-like window
    sa = [dims_a[p] + off_a for p in perm_a]
    sb = [dims_b_store[p] + off_b for p in perm_b]
    A, B = ta.placeholder(tuple(sa), dtype, "A"), ta.placeholder(tuple(sb), dtype, "B")
    raxes = [ta.reduce_axis((0, e), f"k{i}") for i, e in enumerate(ks)]

    def body(*axes):
        bat, i, nax = axes[:nb], axes[nb], axes[nb + 1:]
        ia = list(bat) + [i] + raxes
        ib = list(bat) + raxes + list(nax)
        ib[-1] = nax[-1] + raxes[-1] - (1 if pad else 0)
        ra = A[tuple(ia[p] + off_a for p in perm_a)]
        idx_b = tuple(ib[p] + off_b for p in perm_b)
        if pad:
            w = nax[-1] + raxes[-1] - 1
            rb = ta.if_then_else((w >= 0) & (w < ns[-1]), B[idx_b], 0.0)
        else:
            rb = B[idx_b]
        return ta.sum(ra * rb, raxes)

    C = ta.compute(tuple(shape_b + [m] + ns), body, name="C")
    vw = 16 if dtype == "float32" else 8
    kern = ta.build([C], [A, B], microkernel=True, parallel_min_work=0, tile=(8, 2 * vw, 5, 8))
    assert "matrix product" in str(kern.lowered)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
    want = ta.evaluate([C], {A: a, B: b})[0]
    tol = 1e-4 if dtype == "float32" else 1e-11
    for threads in (1, 2):
        kern.num_threads = threads
        np.testing.assert_allclose(kern(a, b), want, rtol=tol, atol=tol)
