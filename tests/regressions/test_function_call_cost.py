"""A call of a ``ta.function`` cost time quadratic in the number of saved tensors: every
``forward`` and ``backward`` found where each residual comes from again, by looking each saved
tensor up in the tuples of outputs and saved extras -- and tensors compare structurally, their
whole definitions.  A chain of 80 layers spent 26 ms per forward around a 0.1 ms kernel.

Now the residuals' sources are found once per function.  The test counts the structural
comparisons of tensors that a call makes (none, at any depth), not its time."""

from __future__ import annotations

import numpy as np
import pytest
from blocks import dense_tanh_chain_gradient

import tensorad as ta
from tensorad.ir.tensor import Tensor


def _chain(depth: int) -> tuple[ta.Function, np.ndarray, np.ndarray]:
    X = ta.placeholder((4, 8), name="X")
    W = ta.placeholder((8, 8), name="W")
    h = X
    for _ in range(depth):
        h = ta.topi.tanh(ta.topi.nn.dense(h, W))
    f = ta.function(ta.topi.sum(h), [X, W], wrt=[W])
    rng = np.random.default_rng(0)
    return f, rng.random((4, 8), np.float32), (rng.random((8, 8), np.float32) - 0.5) * 0.2


def test_a_call_compares_no_tensors(monkeypatch):
    compared = []
    structural = Tensor.__eq__
    for depth in (3, 24):
        f, x, w = _chain(depth)
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)  # (the kernels built, the plan's lookups made)
        assert len(residuals) >= depth  # (a tanh's output saved per layer)
        compared.clear()
        monkeypatch.setattr(Tensor, "__eq__", lambda a, b: compared.append(1) or structural(a, b))
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)
        monkeypatch.undo()
        assert not compared, f"depth {depth}: {len(compared)} tensor comparisons in one call"


def test_a_backward_checks_only_the_values_its_forward_did_not_make(monkeypatch):
    """Each input of a kernel call is checked (type, shape, dtype, layout), about a microsecond
    an array: a backward reading eighty saved activations spent more checking them than its
    kernel ran.  The saved values its own forward made pass the check once; after that only the
    function's inputs among the residuals and the heads are checked."""
    from tensorad.codegen import Kernel

    f, x, w = _chain(24)
    _, residuals = f.forward(x, w)
    want = f.backward(residuals, 1.0)
    checked = []
    check = Kernel.check_input
    monkeypatch.setattr(Kernel, "check_input",
                        staticmethod(lambda a, spec: checked.append(spec[0]) or check(a, spec)))
    _, residuals = f.forward(x, w)
    got = f.backward(residuals, 1.0)
    monkeypatch.undo()
    made = sum(kind != "input" for kind, _ in f.plan.sources)
    assert made >= 24
    # the forward's two inputs, then the backward's inputs among the residuals and its head
    assert len(checked) == 2 + (len(residuals) - made) + 1, checked
    np.testing.assert_array_equal(got[0], want[0])
    # a plain tuple of the same arrays is checked in full, and gives the same gradient
    np.testing.assert_array_equal(f.backward(tuple(residuals), 1.0)[0], want[0])


def test_residuals_of_another_function_are_checked():
    """Another function's residuals are not trusted: arrays of other shapes are a clear error."""
    f, x, w = _chain(3)
    g, _, _ = _chain(3)
    _, mine = f.forward(x, w)
    f.backward(mine, 1.0)
    f.backward(mine, 1.0)
    x6 = np.ones((6, 8), np.float32)
    X = ta.placeholder((6, 8), name="X")
    W = ta.placeholder((8, 8), name="W")
    other = ta.function(ta.topi.sum(ta.topi.tanh(ta.topi.nn.dense(X, W))), [X, W], wrt=[W])
    _, theirs = other.forward(x6, w)
    with pytest.raises(ValueError, match="residuals must be the"):
        f.backward(theirs, 1.0)
    bad = tuple(np.ones((6, 8), np.float32) for _ in mine)
    with pytest.raises(ValueError, match="expected shape"):
        f.backward(bad, 1.0)
    same_shapes = g.forward(x, w)[1]  # another function's residuals of the right shapes pass the checks
    np.testing.assert_allclose(f.backward(same_shapes, 1.0)[0], g.backward(same_shapes, 1.0)[0])


def test_residuals_copy_and_pickle_as_plain_tuples():
    """The residuals' maker (the whole function) is not copied or pickled with them: a copy is a
    plain tuple of the arrays, whose backward checks every one."""
    import copy
    import pickle

    f, x, w = _chain(2)
    _, residuals = f.forward(x, w)
    want = f.backward(residuals, 1.0)[0]
    for other in (pickle.loads(pickle.dumps(residuals)), copy.deepcopy(residuals), copy.copy(residuals)):
        assert type(other) is tuple and len(other) == len(residuals)
        np.testing.assert_array_equal(f.backward(other, 1.0)[0], want)


def _calls_and_blocks(f: ta.Function, x: np.ndarray, w: np.ndarray) -> tuple[int, int]:
    """The Python and C function calls a forward and its backward make (``sys.setprofile``), and the
    memory blocks their results hold (``tracemalloc``: array data and array objects alike)."""
    import sys
    import tracemalloc

    calls = [0]

    def count(frame, event, arg):
        calls[0] += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)
    finally:
        sys.setprofile(None)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        kept = f.forward(x, w), f.backward(residuals, 1.0)
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    held = sum(s.count_diff for s in after.compare_to(before, "filename") if s.count_diff > 0)
    del kept
    return calls[0], held


@pytest.mark.parametrize("threads", [1, 2])
def test_a_call_allocates_and_calls_as_much_at_any_depth(threads):
    """A forward saving 3 or 24 activations and its backward make the same function calls and hold
    the same number of memory blocks: the saved values that are not outputs are one block whose
    offsets are fixed when the function is built, and the kernels read and write it through an
    address table (no array made, checked or passed per saved value)."""
    counts = []
    for depth in (3, 24):
        f, x, w = _chain(depth)
        for kernel in (f.residual_kernel, f.backward_kernel):
            kernel.num_threads = threads
        _, residuals = f.forward(x, w)
        f.backward(residuals, 1.0)
        assert len(residuals) >= depth
        counts.append(_calls_and_blocks(f, x, w))
    (calls3, held3), (calls24, held24) = counts
    assert calls24 == calls3, counts
    # (51 on one or two threads: checks, allocations and the two native calls)
    assert calls3 <= 54, counts
    assert held24 <= held3 + 2, counts



def test_what_a_call_returns_never_changes_with_the_next_call():
    """Each forward writes new outputs and a new block: outputs and residuals kept from one call keep
    their values through later calls, and the backward of the first residuals gives the first
    gradient, after a second forward and backward."""
    f, x, w = _chain(4)
    rng = np.random.default_rng(1)
    x2 = rng.random((4, 8), np.float32)
    y1, res1 = f.forward(x, w)
    kept = [np.array(r, copy=True) for r in res1]
    y1_copy = np.array(y1, copy=True)
    y2, res2 = f.forward(x2, w)
    g2 = f.backward(res2, 1.0)[0]
    g1 = f.backward(res1, 1.0)[0]
    for r, k in zip(res1, kept):
        np.testing.assert_array_equal(r, k)
    np.testing.assert_array_equal(y1, y1_copy)
    assert not any(np.shares_memory(a, b) for a in (y1, *res1[2:]) for b in (y2, *res2[2:], g2))
    for xv, y, g in ((x, y1, g1), (x2, y2, g2)):
        loss, gw = dense_tanh_chain_gradient(4, xv, w)
        np.testing.assert_allclose(y, loss, rtol=1e-5)
        np.testing.assert_allclose(g, gw, rtol=1e-4, atol=1e-5)
    assert not np.shares_memory(f.backward(res1, 1.0)[0], g1)


def test_residuals_received_in_a_block_off_its_boundary_are_moved():
    """A block of saved values passed through a framework may start anywhere: one off the layout's
    boundary is copied to a new one, and the backward gives the same gradient."""
    from tensorad.training.function import Residuals

    f, x, w = _chain(3)
    _, residuals = f.forward(x, w)
    want = f.backward(residuals, 1.0)[0]
    raw = np.empty(residuals.block.nbytes + 1, np.uint8)[1:]
    raw[...] = residuals.block
    moved = Residuals.received(f, residuals.arrays, raw)
    assert moved.block.ctypes.data % f.layout.align == 0
    np.testing.assert_array_equal(f.backward(moved, 1.0)[0], want)
    with pytest.raises(ValueError, match="block must be"):
        Residuals.received(f, residuals.arrays, raw[1:])


@pytest.mark.parametrize("checked", [False, True])
def test_a_gather_through_the_address_table_is_checked_and_differentiated(checked):
    """A forward and backward called through address tables (a checked kernel's violation record
    among them) give NumPy's values and gradient, and an index out of range raises."""
    E = ta.placeholder((5, 3), name="E")
    Idx = ta.placeholder((4,), "int64", name="I")
    Y = ta.compute((4, 3), lambda i, j: ta.tanh(E[Idx[i], j]), name="Y")
    f = ta.function(ta.topi.sum(Y), [E, Idx], checked=checked)
    e = np.random.default_rng(2).random((5, 3), np.float32)
    idx = np.array([0, 4, 4, 2])
    y, residuals = f.forward(e, idx)
    (ge,) = f.backward(residuals, 1.0)
    want = np.zeros((5, 3))
    np.add.at(want, idx, 1 - np.tanh(e[idx].astype(np.float64)) ** 2)
    np.testing.assert_allclose(y, np.tanh(e[idx].astype(np.float64)).sum(), rtol=1e-5)
    np.testing.assert_allclose(ge, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(IndexError, match="out of range"):
        f.forward(e, np.array([0, 1, 5, 2]))


def test_concurrent_calls_each_get_an_address_table():
    """Threads calling one function at once each take a workspace of their own (its temporaries and
    its address table), so every call's outputs and gradient are its inputs' own."""
    import threading

    f, _, w = _chain(5)
    w = w * 6  # (unit gain: no denormals)
    rng = np.random.default_rng(4)
    xs = [rng.random((4, 8), np.float32) for _ in range(4)]
    want = [dense_tanh_chain_gradient(5, x, w) for x in xs]
    f.backward(f.forward(xs[0], w)[1], 1.0)
    bad = []

    def work(k: int) -> None:
        for _ in range(50):
            y, residuals = f.forward(xs[k], w)
            (g,) = f.backward(residuals, 1.0)
            loss, gw = want[k]
            if not (np.allclose(y, loss, rtol=1e-5) and np.allclose(g, gw, rtol=1e-4, atol=1e-5)):
                bad.append(k)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_the_portable_call_path_reads_the_block_at_its_offsets(monkeypatch):
    """Where NumPy's object layout is not the one the native call reads, the addresses are put in the
    table from Python, each value in the block at its offset: the same outputs, residuals and gradient."""
    from tensorad.codegen.runtime import kernel as kernel_module

    f, x, w = _chain(5)
    y, residuals = f.forward(x, w)
    want = f.backward(residuals, 1.0)[0]
    for k in (f.residual_kernel, f.backward_kernel):
        k.release_workspace()  # (a new address table, filled the portable way)
    monkeypatch.setattr(kernel_module, "ARRAY_DATA_OFFSET", None)
    monkeypatch.setattr(kernel_module, "OFFSETS", None)
    y2, residuals2 = f.forward(x, w)
    got = f.backward(residuals2, 1.0)[0]
    monkeypatch.undo()
    np.testing.assert_array_equal(y2, y)
    for a, b in zip(residuals2, residuals):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(got, dense_tanh_chain_gradient(5, x, w)[1], rtol=1e-4, atol=1e-5)


def test_a_block_call_without_its_block_is_an_error():
    """A backward's call reads saved values from the forward's block: called without one, it says so
    (the addresses would be offsets from nothing)."""
    from tensorad.codegen.runtime.blocks import BlockCall

    f, x, w = _chain(3)
    _, residuals = f.forward(x, w)
    reads = {k: int(f.layout.offsets[j]) for k, (kind, j) in enumerate(f.plan.sources) if kind == "extra"}
    call = BlockCall(f.backward_kernel, reads)
    assert reads
    with pytest.raises(ValueError, match="give the block"):
        call([*residuals.arrays, np.array(1.0, np.float32)])
    (got,), _ = call([*residuals.arrays, np.array(1.0, np.float32)], residuals.block)
    np.testing.assert_array_equal(got, f.backward(residuals, 1.0)[0])
