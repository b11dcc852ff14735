"""``build(..., checked=True)``: bounds checks on every load and store of the generated code.

Out-of-bounds accesses cannot be written in the language (reads are proved in bounds at
definition and again by ``lower``), so the tests that need one switch the proof off, as a bug
in it would, or shrink a buffer of a lowered program by hand.  Ordinary kernels must give the
same answers checked and unchecked, and both agree with ``ta.evaluate``.
"""

from __future__ import annotations

import copy
import sys
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from tensorad.codegen.runtime import compiled_cache
from tensorad.codegen.runtime.compiled_cache import CompiledCache

import tensorad as ta
from tensorad.ir.expr import var
from tensorad.lang import make_compute

LOWER = sys.modules["tensorad.codegen.lower"]
BUILD = sys.modules["tensorad.codegen.build"]


@pytest.fixture
def no_bounds_proof(monkeypatch):
    """``lower`` without its bounds proof: a program that reads out of bounds gets compiled."""
    monkeypatch.setattr(LOWER, "check_op_bounds", lambda op: None)


def _oob_read(rows: int):
    X = ta.placeholder((5, 4), "float32", name="X")
    i, j = var("i", 0, rows), var("j", 0, 4)
    (Y,) = make_compute("Y", [i, j], [X[i, j] * 2.0 + 1.0], check_bounds=False)
    return X, Y


@pytest.mark.parametrize("threads", [1, 2])
def test_out_of_bounds_read_raises(no_bounds_proof, threads):
    X, Y = _oob_read(600)
    kern = ta.build([Y], [X], checked=True, num_threads=threads, parallel_min_work=0, cache=False)
    x = np.ones((5, 4), np.float32)
    for _ in range(20):  # threads race for the record: always one clean error, never a crash
        with pytest.raises(IndexError, match=r"read of tensor X \(shape \[5, 4\]\) at index \[i, j\] "
                                             r"= \[\d+, \d\]: dimension 0 is \d+, outside \[0, 5\)"):
            kern(x)


def test_unchecked_kernel_does_not_check(no_bounds_proof):
    """The same program unchecked runs (it reads past X: the check is what catches it)."""
    X, Y = _oob_read(6)
    kern = ta.build([Y], [X], checked=False, cache=False)
    kern(np.ones((5, 4), np.float32))  # reads one row past X: garbage, but no error
    with pytest.raises(IndexError, match="dimension 0 is 5"):
        ta.build([Y], [X], checked=True, cache=False)(np.ones((5, 4), np.float32))


def test_violation_in_a_lazy_branch_and_a_reduction(no_bounds_proof):
    X = ta.placeholder((4,), "float64", name="X")
    i, k = var("i", 0, 4), ta.reduce_axis((0, 4), name="k")
    # the guard lets i + k reach 6: the taken branch reads past X
    (Y,) = make_compute("Y", [i], [ta.sum(ta.if_then_else(i + k < 7, X[i + k], 0.0), axis=k)],
                        check_bounds=False)
    with pytest.raises(IndexError, match=r"tensor X .* dimension 0 is [4-6]"):
        ta.build([Y], [X], checked=True, cache=False)(np.ones(4))


def test_out_of_bounds_write_raises():
    """A store past its buffer: a lowered program whose output buffer is shrunk by hand."""
    X = ta.placeholder((6, 3), "float32", name="X")
    Y = ta.compute((6, 3), lambda i, j: X[i, j] + 1.0, name="Y")
    lowered = ta.lower([Y], [X], parallel_min_work=0)
    prog = copy.copy(lowered.program)
    small = type(prog.outputs[0])(prog.outputs[0].name, (4, 3), "float32", "output", Y)
    prog.outputs = [small]
    prog.buffers = {**prog.buffers, Y: small}
    fake = SimpleNamespace(program=prog, work=lowered.work, row_work=lowered.row_work, once_work=0,
                           text=lowered.text)
    opts = BUILD.Options.make({"checked": True})
    with BUILD.diskcache.disabled(True):
        compiled = BUILD._compile(fake, "checked-write-test", opts, gomp=True, target=BUILD.host_target())
    kern = BUILD.Kernel(fake, compiled, 2)
    with pytest.raises(IndexError, match=r"write of tensor Y \(shape \[4, 3\]\) at index .* = \[4, \d\]"):
        kern(np.zeros((6, 3), np.float32))


def test_concurrent_calls_keep_their_own_record(no_bounds_proof):
    """Each call has its own violation record: a clean call is not failed by a bad one."""
    X, Y = _oob_read(5)
    A = ta.placeholder((5, 4), "float32", name="A")
    good = ta.build([ta.compute((5, 4), lambda i, j: A[i, j] * 3.0, name="G")], [A], checked=True)
    bad = ta.build([Y], [X], checked=True, cache=False)
    ok = np.ones((5, 4), np.float32)
    errors = []

    def run(k):
        for _ in range(50):
            try:
                good(ok) if k % 2 else bad(ok)
            except IndexError:
                errors.append(k)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert set(errors) <= {0, 2}  # only calls of the bad kernel fail
    np.testing.assert_array_equal(good(ok), 3.0 * ok)


def _axes(t):
    return [ta.reduce_axis((0, n), name=f"r{d}") for d, n in enumerate(t.shape)]


@pytest.mark.parametrize("threads", [1, 2])
def test_checked_and_unchecked_agree(threads):
    rng = np.random.default_rng(1)
    X = ta.placeholder((3, 2, 7, 6), "float64", name="X")
    W = ta.placeholder((4, 2, 3, 3), "float64", name="W")
    conv = ta.topi.nn.conv2d(X, W, 1, 1)
    ax = _axes(conv)
    loss = ta.compute((), lambda: ta.sum(conv[tuple(ax)] ** 2, axis=ax), name="L")
    gX, gW = ta.gradient(loss, [X, W])
    A = ta.placeholder((9, 70), "float32", name="A")
    B = ta.placeholder((70, 33), "float32", name="B")
    S = ta.placeholder((5, 7), "float32", name="S")
    cases = [([gX, gW, conv], [X, W]), ([ta.topi.matmul(A, B)], [A, B]),
             ([ta.topi.nn.pool(X, (2, 2), (2, 2), [0, 0, 1, 1], "max")], [X]),
             ([ta.topi.nn.softmax(S)], [S])]
    for outs, ins in cases:
        feed = {p: rng.standard_normal(p.shape).astype(p.dtype) for p in ins}
        args = [feed[p] for p in ins]
        want = ta.evaluate(outs, feed)
        opts = dict(num_threads=threads, parallel_min_work=0)
        plain = ta.build(outs, ins, **opts)(*args)
        checked = ta.build(outs, ins, checked=True, **opts)(*args)
        plain, checked = (r if isinstance(r, tuple) else (r,) for r in (plain, checked))
        for t, p, c, w in zip(outs, plain, checked, want):
            tol = 1e-4 if t.dtype == "float32" else 1e-10
            np.testing.assert_allclose(c, w, rtol=tol, atol=tol, err_msg=t.name)
            np.testing.assert_allclose(c, p, rtol=tol, atol=tol, err_msg=t.name)


def test_checked_kernel_code_has_the_checks():
    A = ta.placeholder((8,), "float32", name="A")
    Y = ta.compute((8,), lambda i: A[7 - i] * 2.0, name="Y")
    unchecked = ta.build([Y], [A]).llvm_ir_unoptimized
    checked = ta.build([Y], [A], checked=True).llvm_ir_unoptimized
    assert "cmpxchg" in checked and "cmpxchg" not in unchecked


def test_checked_option_must_be_bool():
    A = ta.placeholder((2,), name="A")
    with pytest.raises(TypeError, match="option checked must be True or False"):
        ta.build([ta.compute((2,), lambda i: A[i], name="Y")], [A], checked="yes")


def test_checked_kernel_from_the_disk_cache(no_bounds_proof, monkeypatch):
    """The access sites travel with the cached object code: a kernel linked from the disk
    cache names the same tensor and index."""
    X, Y = _oob_read(7)
    first = ta.build([Y], [X], checked=True, cache=True)
    with pytest.raises(IndexError) as direct:
        first(np.ones((5, 4), np.float32))
    monkeypatch.setattr(compiled_cache, "COMPILED", CompiledCache())  # a new process: only the disk has it
    again = ta.build([Y], [X], checked=True, cache=True)
    assert again.origin == "disk"
    with pytest.raises(IndexError) as cached:
        again(np.ones((5, 4), np.float32))
    assert str(cached.value) == str(direct.value)


_FRESH_PROCESS = """
import copy, sys
from types import SimpleNamespace
import numpy as np
import tensorad as ta
BUILD = sys.modules["tensorad.codegen.build"]
X = ta.placeholder((6, 3), "float32", name="X")
Y = ta.compute((6, 3), lambda i, j: X[i, j] + 1.0, name="Y")
lowered = ta.lower([Y], [X], parallel_min_work=0)
prog = copy.copy(lowered.program)
small = type(prog.outputs[0])(prog.outputs[0].name, (4, 3), "float32", "output", Y)
prog.outputs, prog.buffers = [small], {**prog.buffers, Y: small}
fake = SimpleNamespace(program=prog, work=lowered.work, row_work=lowered.row_work, once_work=0,
                       text=lowered.text)
with BUILD.diskcache.disabled(True):
    compiled = BUILD._compile(fake, "fresh-gomp", BUILD.Options.make({"checked": True}), gomp=True,
                              target=BUILD.host_target())
try:
    BUILD.Kernel(fake, compiled, 2)(np.zeros((6, 3), np.float32))
except IndexError as e:
    print("raised", e)
"""


def test_parallel_kernel_links_its_runtime_in_a_fresh_process(tmp_path):
    """A kernel with parallel loops compiled before anything loaded libgomp: its ``GOMP_parallel``
    was linked to address 0 and the call crashed the process (only when this test file ran
    alone); linking a kernel now sets up the parallel runtime first."""
    import os
    import subprocess

    env = {**os.environ, "TENSORAD_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "raised out-of-bounds write of tensor Y" in done.stdout
