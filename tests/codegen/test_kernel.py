"""Kernel calls: argument checks, out=, layouts, the compile cache, concurrent callers."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tensorad as ta

_BUILD = sys.modules["tensorad.codegen.build"]


def _dense(n=7, m=5, kk=9, dtype="float32"):
    X = ta.placeholder((n, kk), dtype, "X")
    W = ta.placeholder((m, kk), dtype, "W")
    k = ta.reduce_axis((0, kk), "k")
    Y = ta.compute((n, m), lambda i, j: ta.sum(X[i, k] * W[j, k], k), name="Y")
    return X, W, Y


@pytest.fixture(scope="module")
def dense():
    X, W, Y = _dense()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((7, 9)).astype(np.float32)
    w = rng.standard_normal((5, 9)).astype(np.float32)
    return ta.build([Y], [X, W]), x, w


def test_wrong_count(dense):
    kern, x, w = dense
    with pytest.raises(TypeError, match=r"takes 2 input arrays \(X, W\), got 1"):
        kern(x)
    with pytest.raises(ValueError, match="got 3"):
        kern(x, w, w)


def test_wrong_dtype_is_not_cast(dense):
    kern, x, w = dense
    with pytest.raises(TypeError, match="input W: expected dtype float32, got float64"):
        kern(x, w.astype(np.float64))


def test_wrong_shape(dense):
    kern, x, w = dense
    with pytest.raises(ValueError, match=r"input X: expected shape \[7, 9\], got \[9, 7\]"):
        kern(x.T.copy(), w)


def test_not_an_array(dense):
    kern, x, w = dense
    with pytest.raises(TypeError, match="input X: expected a numpy array"):
        kern(x.tolist(), w)


def test_non_contiguous_inputs_are_copied(dense):
    kern, x, w = dense
    xt = np.asfortranarray(x)
    wide = np.zeros((5, 18), np.float32)
    wide[:, ::2] = w
    got = kern(xt, wide[:, ::2])
    np.testing.assert_allclose(got, x @ w.T, rtol=1e-5, atol=1e-5)


def test_out_is_written_in_place(dense):
    kern, x, w = dense
    out = np.full((7, 5), np.nan, np.float32)
    res = kern(x, w, out=out)
    assert res is out
    np.testing.assert_allclose(out, x @ w.T, rtol=1e-5, atol=1e-5)
    res2 = kern(x, w, out=(out,))
    assert res2 is out


def test_bad_out(dense):
    kern, x, w = dense
    with pytest.raises(ValueError, match="out Y: expected shape"):
        kern(x, w, out=np.empty((5, 7), np.float32))
    with pytest.raises(TypeError, match="out Y: expected dtype float32"):
        kern(x, w, out=np.empty((7, 5), np.float64))
    with pytest.raises(ValueError, match="C-contiguous"):
        kern(x, w, out=np.empty((5, 7), np.float32).T)
    with pytest.raises(ValueError, match=r"out= must be 1 array"):
        kern(x, w, out=(np.empty((7, 5), np.float32),) * 2)
    ro = np.empty((7, 5), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        kern(x, w, out=ro)


def test_out_overlapping_an_input_is_refused():
    A = ta.placeholder((4,), "float32", "A")
    Y = ta.compute((4,), lambda i: A[i] + 1.0, name="Y")
    kern = ta.build([Y], [A])
    a = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        kern(a, out=a)


def test_overlap_sweep_agrees_with_numpy_on_random_layouts():
    """Outputs and inputs cut from one buffer at random offsets: the sorted sweep reports an
    overlap exactly when some output shares memory with another argument (``np.shares_memory``
    decides), and the pair it names does overlap; inputs may overlap each other."""
    from tensorad.codegen.runtime.kernel import overlapping_output

    rng = np.random.default_rng(0)
    buf = np.zeros(64, np.float32)
    for _ in range(300):
        cut = [buf[o:o + n] for o, n in zip(rng.integers(0, 60, 7), rng.integers(0, 5, 7))]
        ins, outs = cut[:3], cut[3:]
        args = ins + outs
        found = overlapping_output(ins, outs)
        truth = any(np.shares_memory(outs[k], a) for k in range(len(outs))
                    for j, a in enumerate(args) if j != len(ins) + k)
        assert (found is not None) == truth
        if found is not None:
            k, j = found
            assert j != len(ins) + k and np.shares_memory(outs[k], args[j])


def test_one_out_array_cut_from_an_input_buffer_is_checked_exactly():
    """One ``out=`` array (the path checked in one pass) from the same buffer as the inputs: refused
    where its range meets an input's (by one element, or inside it), accepted where it starts right
    after one, as ``np.shares_memory`` decides."""
    A = ta.placeholder((4,), "float32", "A")
    B = ta.placeholder((4,), "float32", "B")
    kern = ta.build([ta.compute((4,), lambda i: A[i] + B[i], name="Y")], [A, B])
    buf = np.arange(16, dtype=np.float32)
    a, b = buf[:4], buf[8:12]
    for start in range(13):
        out = buf[start:start + 4]
        if np.shares_memory(out, a) or np.shares_memory(out, b):
            with pytest.raises(ValueError, match="out Y: overlaps input [AB]"):
                kern(a, b, out=out)
        else:
            want = a + b
            assert kern(a, b, out=out) is out
            np.testing.assert_array_equal(out, want)
            buf[:] = np.arange(16)


def test_out_overlapping_another_output_names_both():
    A = ta.placeholder((4,), "float32", "A")
    P = ta.compute((4,), lambda i: A[i] + 1.0, name="P")
    Q = ta.compute((4,), lambda i: A[i] * 2.0, name="Q")
    kern = ta.build([P, Q], [A])
    b = np.zeros(6, np.float32)
    with pytest.raises(ValueError, match="out Q: overlaps out P|out P: overlaps out Q"):
        kern(np.ones(4, np.float32), out=(b[:4], b[2:]))


def test_several_outputs_return_a_tuple_in_order():
    A = ta.placeholder((3,), "float64", "A")
    P = ta.compute((3,), lambda i: A[i] + 1.0, name="P")
    Q = ta.compute((3,), lambda i: A[i] * 2.0, name="Q")
    a = np.arange(3.0)
    q, p = ta.build([Q, P], [A])(a)
    np.testing.assert_array_equal(p, a + 1)
    np.testing.assert_array_equal(q, a * 2)


def test_cache_hit_is_fast_and_shared():
    X, W, Y = _dense(6, 4, 3)
    k1 = ta.build([Y], [X, W])
    k2 = ta.build([Y], [X, W])
    assert k2.compiled is k1.compiled
    assert k2.origin == "memory"  # a lookup: nothing compiled, nothing read from disk
    # a structurally equal program built from fresh tensors hits the compiled-code cache too
    X2, W2, Y2 = _dense(6, 4, 3)
    assert ta.build([Y2], [X2, W2]).compiled is k1.compiled
    # a different constant is a different program
    A = ta.placeholder((3,), "float32", "A")
    c1 = ta.build([ta.compute((3,), lambda i: A[i] * 1.0000001, name="c")], [A])
    c2 = ta.build([ta.compute((3,), lambda i: A[i] * 1.0000002, name="c")], [A])
    assert c1.compiled is not c2.compiled


def test_llvm_ir_and_asm_are_text(dense):
    kern, _, _ = dense
    assert "define void" in kern.llvm_ir
    assert "ret" in kern.asm


def test_unsupported_target():
    X, W, Y = _dense()
    with pytest.raises(ValueError, match="target"):
        ta.build([Y], [X, W], target="cuda")


@pytest.mark.parametrize("threads", [1, 2])
def test_threads_calling_one_kernel_concurrently(threads):
    X, W, Y = _dense(64, 48, 40, "float64")
    kern = ta.build([Y], [X, W], num_threads=threads, parallel_min_work=0)
    rng = np.random.default_rng(5)
    data = [(rng.standard_normal((64, 40)), rng.standard_normal((48, 40))) for _ in range(4)]
    errors = []

    def work(x, w):
        for _ in range(20):
            got = kern(x, w)
            if not np.allclose(got, x @ w.T, rtol=1e-12, atol=1e-12):
                errors.append("mismatch")

    ts = [threading.Thread(target=work, args=d) for d in data]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors


def test_vector_width_and_opt_level_options():
    A = ta.placeholder((100,), "float32", "A")
    Y = ta.compute((100,), lambda i: A[i] * 2.0 + 1.0, name="Y")
    a = np.arange(100, dtype=np.float32)
    for opts in ({"vector_width": 1}, {"vector_width": 4}, {"opt_level": 0}, {"opt_level": 1}):
        kern = ta.build([Y], [A], **opts)
        np.testing.assert_array_equal(kern(a), a * 2 + 1)
    assert "<4 x float>" in ta.build([Y], [A], vector_width=4).llvm_ir
    assert "x float>" not in ta.build([Y], [A], vector_width=1).llvm_ir
    with pytest.raises(ValueError, match="vector_width"):
        ta.build([Y], [A], vector_width=3)
    with pytest.raises(ValueError, match="opt_level"):
        ta.build([Y], [A], opt_level=5)
    with pytest.raises(ValueError, match="num_threads"):
        ta.build([Y], [A], num_threads=0)


def test_libgomp_runtime_on_request(torch_libgomp):
    # TENSORAD_PARALLEL_RUNTIME=gomp: the same object code on libgomp, called from three threads
    script = (
        torch_libgomp
        + "import threading, numpy as np, tensorad as ta\n"
        "from tensorad.codegen.runtime import threads as runtime\n"
        "assert 'libgomp' in runtime.parallel_runtime()\n"
        "A = ta.placeholder((300, 300), 'float64', 'A')\n"
        "k = ta.reduce_axis((0, 300), 'k')\n"
        "C = ta.compute((300, 300), lambda i, j: ta.sum(A[i, k] * A[k, j], k), name='C')\n"
        "E = ta.compute((300, 300), lambda i, j: ta.exp(A[i, j]) + C[i, j], name='E')\n"
        "kern = ta.build([E], [A], num_threads=2, parallel_min_work=0)\n"
        "assert kern.num_threads == 2 and 'GOMP_parallel' in kern.llvm_ir\n"
        "a = np.random.default_rng(0).standard_normal((300, 300))\n"
        "want = np.exp(a) + a @ a\n"
        "assert np.allclose(kern(a), want)\n"
        "errors = []\n"
        "def work():\n"
        "    for _ in range(5):\n"
        "        if not np.allclose(kern(a), want): errors.append(1)\n"
        "ts = [threading.Thread(target=work) for _ in range(3)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "assert not errors\n"
        "print('gomp ok')\n")
    env = dict(os.environ, TENSORAD_PARALLEL_RUNTIME="gomp")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "gomp ok" in out.stdout


def test_serial_kernels_without_parallel_loops():
    A = ta.placeholder((300, 300), "float64", "A")
    B = ta.compute((300, 300), lambda i, j: A[i, j] * 2.0, name="B")
    kern = ta.build([B], [A], parallel=False, parallel_min_work=0)
    assert kern.num_threads == 1 and "GOMP" not in kern.llvm_ir
    a = np.arange(90000.0).reshape(300, 300)
    np.testing.assert_array_equal(kern(a), a * 2)


def test_portable_call_path_gives_the_same_results(dense, monkeypatch):
    from tensorad.codegen.runtime import kernel as kernel_module

    kern, x, w = dense
    n = ta.size_var("n")
    X = ta.placeholder((n, 3), "float32", "X")
    rows = ta.build(ta.compute((n, 3), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y"), [X])
    xs = np.arange(21, dtype=np.float32).reshape(7, 3)
    fast = kern(x, w), rows(xs)
    kern.release_workspace()  # (a new address table, of addresses read the portable way)
    # the path used when the NumPy ABI check fails: addresses through ``ndarray.ctypes``
    monkeypatch.setattr(kernel_module, "ARRAY_DATA_OFFSET", None)
    monkeypatch.setattr(kernel_module, "OFFSETS", None)
    portable = kern(x, w), rows(xs)
    monkeypatch.undo()
    for a, b in zip(fast, portable):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(portable[1], xs * 2 + 1)
