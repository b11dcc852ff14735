"""Threads sharing a column sum never store into one cache line (a layer norm's
backward at 2 threads).

A one-axis column sum ``dgamma[j] = sum_i ...`` accumulates in strips of its output, one strip
per trip of its parallel loop, each thread storing its strip once per row.  Strips of 250
columns (1,000 / 4) put one line in two threads' stores on every row, and so did strips of 64
in an output NumPy placed 48 bytes past a line: the line travels between the cores row after
row (2-3x slower at 2 threads than at 1).  Now a parallel strip is a whole number of lines and
the buffers a kernel allocates start on a line (its outputs when it runs on several threads).
The lines are counted from the loops, the calls a 1-thread kernel call makes by a profiler; the
values are checked against a NumPy float64 formula, bitwise equal at any thread count and from
call to call (each column is still summed in row order by one thread)."""

from __future__ import annotations

import ctypes
import sys

import numpy as np
import pytest
from tensorad.codegen.loops.schedule import strip_length
from tensorad.codegen.loops.work import evaluate_index
from tensorad.codegen.program import If, Loop, Nest, Store
from tensorad.codegen.runtime.kernel import empty_aligned
from tensorad.codegen.target import host_target

import tensorad as ta
from tensorad.ir.dtype import numpy_dtype

LINE = host_target().line


def _stores(stmts, env: dict, out: list) -> None:
    """Append ``(buffer name, flat element)`` of every store ``stmts`` run, each loop walked."""
    for s in stmts:
        if isinstance(s, Loop):
            lo, hi = (int(evaluate_index(b, env, 1)[0]) for b in (s.lo, s.hi))
            for v in range(lo, hi, s.step):
                _stores(s.body, {**env, s.var: np.array([v])}, out)
        elif isinstance(s, If):
            _stores(s.then + s.orelse, env, out)  # (both branches: every store that may run)
        elif isinstance(s, Store):
            at = [int(evaluate_index(i, env, 1)[0]) for i in s.index]
            out.append((s.buffer.name, int(np.ravel_multi_index(at, s.buffer.shape)) if at else 0))


def _lines_per_trip(nest: Nest, itemsize: int) -> list[set]:
    """For each trip of ``nest``'s parallel loop: the (buffer, cache line) pairs it stores."""
    (loop,) = nest.body
    assert isinstance(loop, Loop) and loop.kind == "parallel"
    trips = []
    for v in range(int(loop.lo.arg), int(loop.hi.arg), loop.step):
        got: list = []
        _stores(loop.body, {loop.var: np.array([v])}, got)
        trips.append({(name, e * itemsize // LINE) for name, e in got})
    return trips


def _layer_norm(rows: int, cols: int):
    X = ta.placeholder((rows, cols), name="X")
    g = ta.placeholder((cols,), name="g")
    b = ta.placeholder((cols,), name="b")
    Y = ta.topi.nn.layer_norm(X, g, b)
    H = ta.placeholder(Y.shape, name="H")
    return (X, g, b, H), ta.JacobianRecursive(Y, [X, g, b], H)


@pytest.mark.parametrize("cols", [1000, 520])
def test_parallel_strips_of_a_column_sum_own_whole_lines(cols):
    (X, g, b, H), (_, dg, db) = _layer_norm(4, cols)
    lowered = ta.lower([dg, db], [X, g, b, H], parallel_min_work=0)
    # (the column sums run in the pass of the row statistics, into partial columns per chunk of rows)
    (nest,) = [s for s in lowered.program.steps if isinstance(s, Nest) and "g.grad" in s.name
               and s.attrs.range is not None]
    # (the column sums' stores: the pass's row statistics are one element per row)
    trips = [{(name, line) for name, line in trip if name.endswith(".partial")}
             for trip in _lines_per_trip(nest, 4)]
    assert len(trips) >= 2 and all(trips)  # (shared among threads)
    for k, mine in enumerate(trips):
        for other in trips[k + 1:]:
            assert not mine & other  # before: strips of 250 (130) columns shared a line


@pytest.mark.parametrize("dtype, size", [("float32", 4), ("float64", 8), ("bfloat16", 2), ("bool", 1)])
def test_a_parallel_strip_is_whole_lines_also_when_the_l1_shortens_it(dtype, size):
    for extent in (100, 520, 1000, 4099, 8000, 70001):
        for share in (1, 2, 3):  # (sibling strips sharing the L1, :mod:`.stripfuse`)
            tile = strip_length(extent, dtype, True, 32768 // share, 64)
            assert tile * size % 64 == 0 or tile >= extent, (extent, share, tile)


def _buffers_passed(kern, args: list) -> tuple[list[int], tuple]:
    """The addresses of the outputs and temporaries that one call of ``kern`` hands its code
    through ``P_main`` (its address table), and the call's result."""
    compiled, sig, seen = kern.compiled, kern.signature, []
    n_in, main, address = len(sig.inputs), compiled.main, compiled.main_address
    nargs = n_in + len(sig.outputs) + len(sig.temps)

    def spy_main(addrs: int, threads: int):
        seen.extend(list((ctypes.c_uint64 * nargs).from_address(addrs))[n_in:])
        main(addrs, threads)

    spy = type(main)(spy_main)  # (a C function pointer: native code calls it too)
    compiled.main, compiled.main_address = spy, ctypes.cast(spy, ctypes.c_void_p).value
    kern.release_workspace()  # (an address table holds the entry it calls)
    try:
        return seen, kern(*args)
    finally:
        compiled.main, compiled.main_address = main, address
        kern.release_workspace()


@pytest.mark.parametrize("threads", [1, 2])
def test_kernel_buffers_start_on_a_cache_line(rng, threads):
    (X, g, b, H), grads = _layer_norm(24, 50)  # (outputs of 5 KB: past PLAIN_OUTPUT_BYTES)
    kern = ta.build(list(grads), [X, g, b, H], num_threads=threads)
    n_temps = len(kern.signature.temps)
    assert n_temps >= 2
    args = [rng.standard_normal(t.shape).astype(np.float32) for t in (X, g, b, H)]
    want = kern(*args)
    for _ in range(8):
        for outs, temps in [(kern(*args), None), _buffers_passed(kern, args)[::-1]]:
            if threads > 1:
                assert all(o.ctypes.data % LINE == 0 for o in outs)
            if temps is not None:
                assert len(temps) == len(outs) + n_temps and all(a % LINE == 0 for a in temps[-n_temps:])
            for o, w in zip(outs, want):
                np.testing.assert_array_equal(o, w)
    for shape, dtype in [((3, 5), np.float32), ((), np.float64), ((0, 7), np.int32), ((9,), np.int8),
                         ((4, 3), numpy_dtype("bfloat16"))]:
        a = empty_aligned(shape, dtype, LINE)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        assert a.size == 0 or a.ctypes.data % LINE == 0


def test_outputs_of_a_few_cache_lines_are_allocated_as_numpy_does_on_any_threads(rng):
    """Outputs of at most ``PLAIN_OUTPUT_BYTES`` in all take ``np.empty`` on several threads too (an
    aligned block and a view of it cost some microseconds a call; threads splitting so few lines
    share at most a line at each strip's end); larger ones start on a line."""
    from tensorad.codegen.runtime.kernel import PLAIN_OUTPUT_BYTES

    for rows, plain in ((4, True), (24, False)):
        (X, g, b, H), grads = _layer_norm(rows, 50)
        assert (4 * (rows * 50 + 100) <= PLAIN_OUTPUT_BYTES) == plain
        kern = ta.build(list(grads), [X, g, b, H], num_threads=2)
        args = [rng.standard_normal(t.shape).astype(np.float32) for t in (X, g, b, H)]
        outs, want = kern(*args), ta.build(list(grads), [X, g, b, H], num_threads=1)(*args)
        assert all((o.base is None) == plain for o in outs)
        assert plain or all(o.ctypes.data % LINE == 0 for o in outs)
        for o, w in zip(outs, want):
            np.testing.assert_array_equal(o, w)


def test_a_call_on_one_thread_allocates_as_numpy_does(rng):
    """Aligning costs a 1-thread call nothing: lnorm8's ``np.prod`` and ``a.ctypes`` per buffer
    (about 12 Python and C function calls each, 10-20 us) made a layer norm 1.25x slower at 1
    thread, and an address read, an ``np.ndarray`` over the bytes and a slice still cost 2-4 us
    a buffer.  Counted as the function calls a kernel call makes (``sys.setprofile``): 104
    then, 32 with NumPy's ``np.empty`` and the input checks of that time, 21 now."""
    (X, g, b, H), grads = _layer_norm(6, 50)
    kern = ta.build(list(grads), [X, g, b, H], num_threads=1)
    args = [rng.standard_normal(t.shape).astype(np.float32) for t in (X, g, b, H)]
    kern(*args)
    calls = [0]

    def count(frame, event, arg):
        calls[0] += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        kern(*args)
    finally:
        sys.setprofile(None)
    sig = kern.signature
    assert len(sig.inputs) + len(sig.outputs) + len(sig.temps) == 9  # (4 + 3 + two row statistics)
    assert calls[0] <= 24, calls[0]  # now 21; before: 104 (main: 32)


def test_column_sums_are_exact_and_the_same_at_any_thread_count(rng):
    rows, cols = 96, 1000
    (X, g, b, H), grads = _layer_norm(rows, cols)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    gg = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    bb = rng.standard_normal(cols).astype(np.float32)
    h = rng.standard_normal((rows, cols)).astype(np.float32)
    kern = ta.build(list(grads), [X, g, b, H], parallel_min_work=0)
    first = None
    for threads in (1, 2, 3, 2, 1):
        kern.num_threads = threads
        got = kern(x, gg, bb, h)
        if first is None:
            first = got
        for a, c in zip(got, first):
            np.testing.assert_array_equal(a, c)
    x64, h64 = x.astype(np.float64), h.astype(np.float64)
    xhat = (x64 - x64.mean(1, keepdims=True)) / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(first[1], (h64 * xhat).sum(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(first[2], h64.sum(0), rtol=1e-4, atol=1e-4)
    dxhat = h64 * gg
    dx = (dxhat - dxhat.mean(1, keepdims=True) - xhat * (dxhat * xhat).mean(1, keepdims=True)) \
        / np.sqrt(x64.var(1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(first[0], dx, rtol=1e-3, atol=1e-4)


def test_the_small_outputs_of_a_call_share_one_allocation_each_on_a_line(rng):
    """On several threads each output starts on a cache line; the small ones are laid out in one
    allocation per call (one allocator call, not one each), the large ones have their own (so
    that keeping a small output alive never keeps a large one)."""
    X = ta.placeholder((300, 70), name="X")
    outs = [ta.compute((k,), lambda i, k=k: X[i, 0] * float(k), name=f"s{k}") for k in (1, 7, 33, 70)]
    outs.append(ta.compute((300, 70), lambda i, j: X[i, j] + 1.0, name="big"))  # 84 KB
    kern = ta.build(outs, [X], num_threads=2)
    x = rng.standard_normal((300, 70)).astype(np.float32)
    got = kern(x)
    for k, o in zip((1, 7, 33, 70), got):
        np.testing.assert_array_equal(o, x[:k, 0] * np.float32(k))
    np.testing.assert_array_equal(got[-1], x + np.float32(1))
    assert all(o.ctypes.data % LINE == 0 and o.flags.c_contiguous and o.flags.writeable for o in got)
    small = got[:-1]
    assert all(o.base is small[0].base for o in small) and got[-1].base is not small[0].base
    assert not any(np.shares_memory(a, b) for k, a in enumerate(got) for b in got[k + 1:])
    again = kern(x)
    assert not np.shares_memory(again[0], got[0])  # (a new block each call)
