"""``vector_width`` hints go only on loops LLVM's vectorizer can take (codegen/llvm/vectorizable.py).

A width hint makes LLVM print an always-on remark ("loop not vectorized: ...") on stderr for
every hinted loop it cannot vectorize -- a user's build must print nothing -- and it licenses
LLVM to reorder a float sum, so ``fastmath=False`` (IEEE order) with a ``vector_width`` summed
in another order.  LLVM writes to file descriptor 2 itself: the test captures at the fd level
(``capfd``)."""

import numpy as np
import pytest

import tensorad as ta


def _argmax(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_argmax, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")


@pytest.mark.parametrize("options", [{"vector_width": 4}, {"vector_width": 8, "fastmath": False},
                                     {"vector_width": 2, "checked": True, "opt_level": 2}])
def test_build_with_vector_width_writes_nothing(capfd, options):
    """An argmax's select chain is no reduction LLVM knows: its loop must carry no hint."""
    X = ta.placeholder((9, 200), "float32", name="X")
    k = ta.reduce_axis((0, 200), name="k")
    Idx, V = ta.compute((9,), lambda i: ARGMAX((k, X[i, k]), axis=k), name="am")
    x = np.random.default_rng(0).uniform(-2, 2, X.shape).astype("float32")
    capfd.readouterr()
    i, v = ta.build([Idx, V], [X], **options)(x)
    err = capfd.readouterr().err
    assert err == "", err
    np.testing.assert_array_equal(i, np.argmax(x, axis=1))
    np.testing.assert_array_equal(v, np.max(x, axis=1))


@pytest.mark.parametrize("rows", [17, 22])
def test_window_loop_that_loses_peeled_iterations_writes_nothing(capfd, rows):
    """A window loop (an argmax per row) of 17 rows that also tests
    ``i <= 1``.  LLVM peels the first two rows to settle the test, 15 are left -- below its
    tiny-trip threshold, where the ``% 4`` row address would need run-time checks -- and it
    declined the width hint aloud.  A trip count within the peeling limit of the threshold
    now counts as tiny when the loop compares its variable."""
    X = ta.placeholder((4, 2), "float64", name="X")
    r, s = ta.reduce_axis((0, 9), name="r"), ta.reduce_axis((0, 9), name="s")
    M = ta.compute((rows,), lambda i: ta.if_then_else(i <= 1, ta.max(X[(i - 3) % 4, 0] * 2.0, axis=r), 0.0),
                   name="M")
    Idx, V = ta.compute((rows,), lambda i: ARGMAX((s, X[(i - 3) % 4, s % 2]), axis=s), name="am")
    x = np.random.default_rng(0).uniform(-1, 1, (4, 2))
    capfd.readouterr()
    m, i, v = ta.build([M, Idx, V], [X], vector_width=16, cache=False)(x)
    err = capfd.readouterr().err
    assert err == "", err
    rows_of = x[(np.arange(rows) - 3) % 4]
    np.testing.assert_array_equal(v, rows_of.max(axis=1))
    np.testing.assert_array_equal(m, np.where(np.arange(rows) <= 1, 2.0 * rows_of[:, 0], 0.0))


def test_window_loop_with_a_float_test_of_its_variable_writes_nothing(capfd):
    """The same with 16 rows and ``float(3 i) > 0`` in a select, which
    LLVM's instcombine makes ``i > 0`` and peels: a float compare counts as a test of it."""
    X = ta.placeholder((4, 1), "float64", name="X")
    r = ta.reduce_axis((0, 3), name="r")

    def row(i):
        x = X[(i * 3 + r) % 4, 0]
        fi = ta.cast("float64", ta.cast("int64", i) * 3)
        return ta.select(x == ta.select(fi > 0.0, fi, X[(r + 1) % 4, 0]), x, ta.const(2.0, "float64"))

    _, V = ta.compute((16,), lambda i: ARGMAX((r, row(i)), axis=r), name="am")
    x = np.random.default_rng(1).uniform(-1, 1, (4, 1))
    capfd.readouterr()
    got = ta.build([V], [X], cache=False)(x)
    err = capfd.readouterr().err
    assert err == "", err
    i, k = np.arange(16)[:, None], np.arange(3)
    vals = x[(i * 3 + k) % 4, 0]
    want = np.where(vals == np.where(3 * i > 0, 3.0 * i, x[(k + 1) % 4, 0]), vals, 2.0).max(axis=1)
    np.testing.assert_array_equal(got, want)


def _in_order(terms: list[np.ndarray]) -> np.ndarray:
    """``terms`` added one after another in float32, starting from zero."""
    total = np.zeros_like(terms[0])
    for t in terms:
        total = (total + t).astype(np.float32)
    return total


@pytest.mark.parametrize("width", [4, 8])
def test_strict_sum_keeps_its_order_under_a_width(width):
    """``fastmath=False``: the sum is added in the loop program's order, bit for bit, whatever
    the width.  For 1,000 float32 terms that order is blocked (:mod:`tensorad.codegen.loops.cascade`):
    blocks of 16 terms, each summed in index order; the 62 block sums in groups of 16 (the last
    of 14); the four group sums, then the 8 terms left, each added to the total in turn."""
    X = ta.placeholder((4, 1000), "float32", name="X")
    k = ta.reduce_axis((0, 1000), name="k")
    S = ta.compute((4,), lambda i: ta.sum(X[i, k], axis=k), name="S")
    x = (np.random.default_rng(1).standard_normal((4, 1000)) * 1000).astype(np.float32)
    blocks = [_in_order([x[:, j] for j in range(b * 16, b * 16 + 16)]) for b in range(62)]
    groups = [_in_order(blocks[g:g + 16]) for g in range(0, 62, 16)]
    want = _in_order(groups + [_in_order([x[:, j] for j in range(992, 1000)])])
    np.testing.assert_array_equal(ta.build([S], [X], fastmath=False, vector_width=width)(x), want)


def test_vectorizable_loops_keep_the_width():
    """The hint still reaches loops LLVM can vectorize: an elementwise loop and a fast sum."""
    A = ta.placeholder((64, 64), "float32", name="A")
    k = ta.reduce_axis((0, 64), name="k")
    Y = ta.compute((64, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="Y")
    S = ta.compute((64,), lambda i: ta.sum(A[i, k] * A[i, k], axis=k), name="S")
    for t in (Y, S):
        ir_text = ta.build([t], [A], vector_width=4, opt_level=2).llvm_ir
        assert "<4 x float>" in ir_text, t.name


def _loop(store_index):
    """A one-block loop body ``Y[f(i)] = X[i]`` in hand-written IR: (body, iv)."""
    import llvmlite.ir as ir

    i64, f32, ptr = ir.IntType(64), ir.FloatType(), ir.PointerType()
    m = ir.Module()
    fn = ir.Function(m, ir.FunctionType(ir.VoidType(), [ptr, ptr]), "f")
    entry, body = fn.append_basic_block("entry"), fn.append_basic_block("body")
    b = ir.IRBuilder(entry)
    b.branch(body)
    b.position_at_end(body)
    iv = b.phi(i64, name="i")
    x = b.load(b.gep(fn.args[0], [iv], source_etype=f32), typ=f32)
    b.store(x, b.gep(fn.args[1], [store_index(b, iv)], source_etype=f32))
    return body, iv


def test_vectorizable_reads_the_loop_body():
    """The rules of codegen/llvm/vectorizable.py on hand-made loops: a store that moves with the
    loop affinely takes a hint; one at a fixed place or at ``i % 3`` does not, nor does a loop
    of fewer trips than LLVM's tiny-loop threshold."""
    import llvmlite.ir as ir
    from tensorad.codegen.llvm.vectorizable import TINY_TRIPS, vectorizable

    c = ir.IntType(64)
    cases = {"affine": (lambda b, iv: b.add(b.mul(iv, c(2)), c(1)), True),
             "invariant": (lambda b, iv: c(4), False),
             "modulo": (lambda b, iv: b.srem(iv, c(3)), False)}
    for name, (index, want) in cases.items():
        body, iv = _loop(index)
        assert vectorizable(body, body, iv, (), None) is want, name
    body, iv = _loop(cases["affine"][0])
    assert vectorizable(body, body, iv, (), TINY_TRIPS)
    assert not vectorizable(body, body, iv, (), TINY_TRIPS - 1)


@pytest.mark.parametrize("dtype,options", [("float32", {"checked": True}), ("float16", {}),
                                           ("float32", {})])
def test_pool_window_hint_writes_nothing(capfd, dtype, options):
    """A max pool's window loop is asked to vectorize only after LLVM unrolls its inner loops
    (codegen/llvm/unrolled_chains.window_vector_width); a checked build's bounds tests (an early exit) or a
    half-precision conversion call in that loop withdraw the hint (LLVM
    printed "loop not vectorized" remarks for them)."""
    X = ta.placeholder((2, 3, 30, 30), dtype, "X")
    Y = ta.topi.nn.pool(ta.topi.nn.relu(X), 2, 2, [0] * 4, "max")
    x = np.random.default_rng(2).uniform(-1, 1, X.shape).astype(dtype)
    capfd.readouterr()
    f = ta.function(Y, [X], target="llvm -mcpu=haswell", **options)
    y = f(x)
    err = capfd.readouterr().err
    assert err == "", err
    want = np.maximum(x, 0).reshape(2, 3, 15, 2, 15, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(np.asarray(y, dtype), want)
    # (an exact source's maximum is found by a sum, with no window loop: the hint on a winner
    # reduction's loop is tests/codegen/test_window_vectorize.py's)


def test_argmax_that_does_not_move_with_the_output_writes_nothing(capfd):
    """The jvp of an argmax whose window reads the same column of ``x`` for
    every output element; the loop over the outputs started the accumulators, so it was hinted,
    but its body is invariant in it (LLVM hoisted it and printed "loop not vectorized")."""
    x = ta.placeholder((7, 1), "float64", "x")
    u = ta.placeholder((7, 1), "float64", "u")
    r = ta.reduce_axis((1, 4), "r")
    _, y = ta.compute((5, 3, 2), lambda a, b, c: ARGMAX((r, ta.sigmoid(x[(r + 3) % 7, 0])), axis=[r]), "y")
    xv, uv = np.random.default_rng(3).uniform(-1, 1, (2, 7, 1))
    capfd.readouterr()
    got = ta.build(ta.jvp(y, [x], [u]), [x, u], opt_level=3)(xv, uv)
    err = capfd.readouterr().err
    assert err == "", err
    win = 1 + int(np.argmax(xv[4:7, 0]))  # the first of the largest sigmoid(x[r + 3]), r in [1, 4)
    s = 1 / (1 + np.exp(-xv[win + 3, 0]))
    np.testing.assert_allclose(np.asarray(got), np.full((5, 3, 2), uv[win + 3, 0] * s * (1 - s)), rtol=1e-12)


_HINTED_LOOP = """
declare double @opaque(double)

define void @f(ptr noalias %x, ptr noalias %y) {{
entry:
  br label %body
body:
  %i = phi i64 [0, %entry], [%next, %body]
  %px = getelementptr inbounds double, ptr %x, i64 %i
  %v = load double, ptr %px
  %w = {op}
  %py = getelementptr inbounds double, ptr %y, i64 %i
  store double %w, ptr %py
  %next = add nsw i64 %i, 1
  %more = icmp slt i64 %next, 1024
  br i1 %more, label %body, label %exit, !llvm.loop !1
exit:
  ret void
}}

!0 = !{{ !"llvm.loop.vectorize.width", i32 4 }}
!1 = distinct !{{ !1, !0 }}
"""


@pytest.mark.parametrize("op, declined", [("call double @opaque(double %v)", True),
                                          ("fmul double %v, 2.0", False)])
def test_a_width_hint_llvm_declines_is_dropped_quietly(capfd, op, declined):
    """The last line of defence (codegen/jit/engine.compile_kernel: a hint the
    emitter's judgement let through): a declined hint's remark is caught and the module compiled
    again without width hints; a hint LLVM takes stays."""
    from tensorad.codegen.jit import engine as jit

    capfd.readouterr()
    text, obj, beside = jit.compile_kernel(_HINTED_LOOP.format(op=op), 3)
    assert capfd.readouterr().err == ""
    assert obj and beside == []
    assert ('"llvm.loop.vectorize.width"' in text) is not declined
