"""The packed vector micro-kernel for matmul-like contractions: every layout, edge and block."""

import numpy as np
import pytest

import tensorad as ta

RNG = np.random.default_rng(7)

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
    return ta.lower([C], [A, B], **opts), ta.build([C], [A, B], **opts), a, b, ref


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
