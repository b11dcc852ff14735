"""Fills and scatter-adds at several threads (2 threads; a scatter that would otherwise run serially).

* A large fill is fused into the nest that owns the buffer's slices (``codegen/loops/fills.py``):
  max pooling's backward zeroes each ``X.grad[n, c]`` in the iteration that scatters into it;
  a prefix max fills each row's ``-inf`` in the row's own iteration.
* A fill that no nest owns (a scatter through a gather on the leading axis) is split among the
  threads by pages (``parallel memset``).
* A gather's scatter-add ``dE[d(i), j] += H[i, j]`` shares its column loop among threads: each
  element's adds keep the order of ``i``, so the result equals NumPy's ``np.add.at`` in float32
  (sequential adds in index order) bit for bit at any thread count.

Oracles: NumPy formulas written here (a window loop for max pooling, ``np.add.at``,
``np.maximum.accumulate``); results at 1, 2 and 3 threads must be bit-identical.  Both parallel
runtimes: tensorad's pool in this process, libgomp in a subprocess
(``TENSORAD_PARALLEL_RUNTIME=gomp``) that runs :func:`run_cases`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tensorad.codegen.target import parse_target

import tensorad as ta

THREADS = (1, 2, 3)
SHARE = {"parallel_min_work": 0}  # (small shapes: every nest and fill is worth sharing)


def _pool_grad(shape, kernel, stride, pad, **opts):
    X = ta.placeholder(shape, "float32", "X")
    Y = ta.topi.nn.pool(X, [kernel] * 2, [stride] * 2, [pad] * 4, "max")
    H = ta.placeholder(Y.shape, "float32", "H")
    [dX] = ta.JacobianRecursive(Y, [X], H)
    return X, H, dX


def _pool_grad_numpy(x, h, kernel, stride, pad):
    """Every maximum of a window gets ``H / ties`` (PyTorch's rule; random data has no ties)."""
    n, c, hh, ww = x.shape
    xp = np.full((n, c, hh + 2 * pad, ww + 2 * pad), -np.inf)
    xp[:, :, pad:pad + hh, pad:pad + ww] = x
    g = np.zeros_like(xp)
    for oy in range(h.shape[2]):
        for ox in range(h.shape[3]):
            win = xp[:, :, oy * stride:oy * stride + kernel, ox * stride:ox * stride + kernel]
            top = win.max(axis=(2, 3), keepdims=True)
            hit = win == top
            g[:, :, oy * stride:oy * stride + kernel, ox * stride:ox * stride + kernel] += \
                hit * (h[:, :, oy, ox, None, None] / hit.sum(axis=(2, 3), keepdims=True))
    return g[:, :, pad:pad + hh, pad:pad + ww]


def _embedding_grad(V, N, D, **opts):
    E = ta.placeholder((V, D), "float32", "E")
    Ix = ta.placeholder((N,), "int32", "I")
    Y = ta.topi.embedding(E, Ix)
    H = ta.placeholder(Y.shape, "float32", "H")
    [dE] = ta.JacobianRecursive(Y, [E], H)
    return Ix, H, dE


def _add_at(V, idx, h):
    want = np.zeros((V, h.shape[1]), h.dtype)
    np.add.at(want, idx, h)  # sequential float32 adds in the order of the indices
    return want


def _prefix_max(n, m):
    """``R[i, j] = max_{k < j} A[i, k]``: row ``i``'s ``R[i, 0]`` is the identity, -inf."""
    A = ta.placeholder((n, m), "float32", "A")
    k = ta.reduce_axis((0, m), "k")
    R = ta.compute((n, m), lambda i, j: ta.max(A[i, k], k, where=k < j), name="R")
    return A, R


def _at_threads(kernel, *args):
    """The kernel's results at 1, 2 and 3 threads, checked bit-identical; the 1-thread one."""
    outs = []
    for t in THREADS:
        kernel.num_threads = t
        outs.append(np.asarray(kernel(*args)))
    for t, o in zip(THREADS[1:], outs[1:]):
        np.testing.assert_array_equal(o, outs[0], err_msg=f"{t} threads differ from 1")
    return outs[0]


def check_pool(shape, kernel, stride, pad, seed=0):
    X, H, dX = _pool_grad(shape, kernel, stride, pad)
    k = ta.build([dX], [X, H], num_threads=2, **SHARE)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    h = rng.standard_normal(tuple(H.shape)).astype(np.float32)
    got = _at_threads(k, x, h)
    np.testing.assert_allclose(got, _pool_grad_numpy(x.astype(np.float64), h.astype(np.float64),
                                                      kernel, stride, pad), rtol=1e-6, atol=1e-6)
    return k


def check_embedding(V, N, D, seed=0):
    Ix, H, dE = _embedding_grad(V, N, D)
    k = ta.build([dE], [Ix, H], num_threads=2, **SHARE)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, V, N).astype(np.int32)
    h = rng.standard_normal((N, D)).astype(np.float32)
    got = _at_threads(k, idx, h)
    if "scatter-add" in str(k.lowered):
        np.testing.assert_array_equal(got, _add_at(V, idx, h))
    else:  # (one row, V = 1: the optimizer's plain sum over i, vectorized)
        np.testing.assert_allclose(got, _add_at(V, idx, h.astype(np.float64)), rtol=1e-5, atol=1e-5)
    return k


def check_prefix_max(n, m, seed=0):
    A, R = _prefix_max(n, m)
    k = ta.build([R], [A], num_threads=2, **SHARE)
    a = np.random.default_rng(seed).standard_normal((n, m)).astype(np.float32)
    want = np.concatenate([np.full((n, 1), -np.inf, np.float32),
                           np.maximum.accumulate(a, axis=1)[:, :-1]], axis=1)
    np.testing.assert_array_equal(_at_threads(k, a), want)
    return k


def run_cases() -> None:
    """Every case of this file once (the libgomp subprocess runs this)."""
    check_pool((2, 3, 9, 9), 3, 2, 1)
    check_embedding(40, 300, 64)
    check_embedding(3000, 50, 8)  # a fill of 24,000 floats at 3 threads: 6 pages per thread
    check_prefix_max(37, 50)


def test_max_pool_grad_zeroes_each_slice_in_its_own_iteration():
    X, H, dX = _pool_grad((2, 3, 9, 9), 3, 2, 1)
    text = str(ta.lower([dX], [X, H], **SHARE))
    # (the forward's padding sum, one int per window position, is a memset of its own)
    assert "memset 0 -> X.grad" not in text and "fills X.grad slice by slice" in text, text
    # the fill is bookkeeping: the work is the scatter's, as with the separate memset
    assert ta.lower([dX], [X, H], **SHARE).work == ta.lower([dX], [X, H], parallel=False).work
    check_pool((2, 3, 9, 9), 3, 2, 1)


def test_large_fill_is_fused_also_in_a_serial_build():
    # a buffer larger than the target's L2 cache (the host's where the target runs here: 512
    # KiB to 2 MiB on the machines seen): one pass over memory, not two
    target = "llvm -mcpu=haswell"
    channels = parse_target(target).l2 // (2 * 130 * 130 * 4) + 1
    X, H, dX = _pool_grad((2, channels, 130, 130), 2, 2, 0)
    assert dX.size * 4 > parse_target(target).l2
    text = str(ta.lower([dX], [X, H], parallel=False, target=target))
    assert "memset" not in text and "fills X.grad slice by slice" in text, text
    check_pool((2, channels, 130, 130), 2, 2, 0)


def test_identity_fill_of_a_reduction_is_fused_per_row():
    A, R = _prefix_max(37, 50)
    text = str(ta.lower([R], [A], **SHARE))
    assert "fill -inf" not in text and "fills R slice by slice" in text, text
    check_prefix_max(37, 50)


def test_unowned_fill_runs_in_parallel_and_columns_are_shared():
    Ix, H, dE = _embedding_grad(40, 300, 64)
    text = str(ta.lower([dE], [Ix, H], **SHARE))
    assert "parallel memset 0 -> E.grad" in text, text  # (the leading axis is a gather)
    assert "parallel for" in text and "columns of" in text, text
    check_embedding(40, 300, 64)
    check_embedding(3000, 50, 8)


def test_short_rows_keep_the_serial_scatter():
    # 8 float32 columns are half a cache line: two threads would share lines on every row
    Ix, H, dE = _embedding_grad(40, 300, 8)
    assert "parallel for" not in str(ta.lower([dE], [Ix, H], **SHARE))


def test_libgomp_runtime_gives_the_same_results(torch_libgomp):
    script = (torch_libgomp
              + "import importlib.util, sys\n"
              "from tensorad.codegen.runtime import threads as runtime\n"
              "assert 'libgomp' in runtime.parallel_runtime()\n"
              f"spec = importlib.util.spec_from_file_location('cases', {__file__!r})\n"
              "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
              "m.run_cases()\n"
              "print('gomp ok')\n")
    env = dict(os.environ, TENSORAD_PARALLEL_RUNTIME="gomp")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "gomp ok" in out.stdout


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 3), c=st.integers(1, 4), hw=st.integers(2, 11), kernel=st.integers(1, 3),
       stride=st.integers(1, 3), pad=st.integers(0, 1), seed=st.integers(0, 1000))
def test_random_pool_shapes(n, c, hw, kernel, stride, pad, seed):
    assume(pad <= kernel // 2 and hw + 2 * pad >= kernel)  # (a window always reaches into x)
    check_pool((n, c, hw, hw), kernel, stride, pad, seed)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(V=st.integers(1, 60), N=st.integers(1, 200), D=st.integers(1, 80), seed=st.integers(0, 1000))
def test_random_embedding_shapes(V, N, D, seed):
    check_embedding(V, N, D, seed)


def test_out_of_range_index_is_an_error_at_every_thread_count():
    Ix, H, dE = _embedding_grad(40, 300, 64)
    k = ta.build([dE], [Ix, H], num_threads=3, **SHARE)
    idx = np.arange(300, dtype=np.int32) % 40
    idx[123] = 41
    h = np.ones((300, 64), np.float32)
    for t in THREADS:
        k.num_threads = t
        with pytest.raises(IndexError, match="41"):
            k(idx, h)


def test_checked_build_of_a_fused_fill_runs_in_bounds():
    X, H, dX = _pool_grad((2, 3, 9, 9), 3, 2, 1)
    k = ta.build([dX], [X, H], num_threads=2, checked=True, **SHARE)
    assert "slice by slice" in str(k.lowered)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 9, 9)).astype(np.float32)
    h = rng.standard_normal(tuple(H.shape)).astype(np.float32)
    want = _pool_grad_numpy(x.astype(np.float64), h.astype(np.float64), 3, 2, 1)
    np.testing.assert_allclose(_at_threads(k, x, h), want, rtol=1e-6, atol=1e-6)


def test_no_fill_is_fused_outside_a_deeper_parallel_loop():
    # for v: (parallel for j: B[v, 39 - j] = ...): every thread runs each v, so a fill of
    # B[v, :] there would erase what another thread wrote; a parallel v owns its slices
    from tensorad.codegen.loops.fills import fuse_fill
    from tensorad.codegen.program import Buffer, Fill, Loop, Nest, NestAttrs, Program, Store

    from tensorad.ir.expr import const, var

    A = ta.placeholder((6, 40), "float32", "A")
    buf = Buffer("B", (6, 40), "float32", "output", A)
    v, j = var("v", 0, 6), var("j", 0, 40)

    def nest(outer, inner):
        store = Store(buf, (v, const(39) - j), const(1.0))
        return Nest("B", (Loop(v, const(0), const(6), (Loop(j, const(0), const(40), (store,), 1, inner),),
                               1, outer),), (buf,), 240, parallel=True, attrs=NestAttrs(range=(0, 6, 1)))
    fill = Fill(buf, const(0.0))
    inner_parallel = nest("serial", "parallel")
    program = Program("p", [], [buf], [], [fill, inner_parallel], {A: buf})
    assert fuse_fill(program, fill, inner_parallel) is None
    outer_parallel = nest("parallel", "serial")
    fused = fuse_fill(program, fill, outer_parallel)
    assert fused is not None and "fills B slice by slice" in fused.note
