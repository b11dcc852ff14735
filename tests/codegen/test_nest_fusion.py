"""Loop fusion of nests over one iteration domain (:mod:`tensorad.codegen.loops.nest_groups`, ``nestfuse``).

An elementwise chain ``s0[i] = f(X[i])``, ``t1[i] = g(s0[i])``, ... whose links are
materialized becomes one loop whose body stores every link, in order: each consumer reads its
producer at the point the loop is at, written earlier in the same iteration.  Checked here:

* counts, never the clock: the nests of an ``n``-link chain's gradient grow as ``n / 8`` (at
  most :data:`~tensorad.codegen.loops.nest_groups.MAX_MEMBERS` links per nest), not ``n``; ``work`` is the
  same fused or not (each member's body executions count, as in a nest of its own);
* values: random chains with branches (a link reading two earlier links), broadcasts,
  reductions between links and several outputs, every link forced into a buffer, built fused
  with 1 and 2 threads (parallel loops forced), against ``ta.evaluate`` and against the same
  program written in float64 NumPy by the test.
"""

from __future__ import annotations

import numpy as np
from blocks import tanh_chain
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorad.codegen.loops.nest_groups import MAX_MEMBERS
from tensorad.codegen.program import Nest

import tensorad as ta

SETTINGS = dict(deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _nests(lowered) -> list[Nest]:
    return [s for s in lowered.program.steps if isinstance(s, Nest)]


def _chain(n: int, size: int = 16):
    """:func:`blocks.tanh_chain`, summed."""
    X, Y = tanh_chain(n, size, "float64")
    r = ta.reduce_axis((0, size), "r")
    return X, ta.compute((), lambda: ta.sum(Y[r], axis=r), name="L")


def _chain_gradient_reference(x: np.ndarray, n: int) -> np.ndarray:
    """d sum(chain(x)) / dx in float64 NumPy, by the chain rule link by link."""
    y, d = x.copy(), np.ones_like(x)
    for k in range(n):
        if k % 2:
            t = np.tanh(y)
            y, d = t * 0.9, d * (1 - t * t) * 0.9
        else:
            s = 1 / (1 + np.exp(-y))
            y, d = s + y * 0.5, d * (s * (1 - s) + 0.5)
    return d


def test_the_gradient_of_an_elementwise_chain_fuses_into_few_nests():
    counts = {}
    for n in (24, 48):
        X, L = _chain(n)
        (g,) = ta.gradient(L, [X])
        fused, alone = ta.lower([g], [X]), ta.lower([g], [X], fuse=False)
        counts[n] = len(_nests(fused))
        assert len(_nests(alone)) >= n - 1  # one nest per stored link without fusion
        assert counts[n] <= -(-n // MAX_MEMBERS) + 2, str(fused)
        assert fused.work == alone.work  # fusing changes the schedule, not the work
    assert counts[48] <= 2 * counts[24] + 1, counts
    x = np.linspace(-2, 2, 16)
    for threads in (1, 2):
        got = ta.build([g], [X], num_threads=threads, parallel_min_work=0)(x)
        np.testing.assert_allclose(got, _chain_gradient_reference(x, 48), rtol=1e-12)


def test_one_loop_stores_every_link_of_a_chain():
    X = ta.placeholder((6, 5), "float32", name="X")
    A = ta.compute((6, 5), lambda i, j: ta.exp(X[i, j]), name="A")
    B = ta.compute((6, 5), lambda i, j: A[i, j] * A[i, j] + 1.0, name="B")
    C = ta.compute((6, 5), lambda i, j: ta.log(B[i, j]) - A[i, j], name="C")
    low = ta.lower([C], [X], materialize=[A, B])
    (nest,) = _nests(low)
    assert "fused over" in nest.note and low.work == 3 * 30
    x = np.random.default_rng(0).standard_normal((6, 5)).astype(np.float32)
    e = np.exp(x.astype(np.float64))
    np.testing.assert_allclose(ta.build([C], [X], materialize=[A, B])(x), np.log(e * e + 1) - e, rtol=1e-5)


# ---- random chains -------------------------------------------------------------------------------

ROWS, COLS = 5, 7


@st.composite
def random_chain(draw):
    """(steps, outputs): each step makes one (ROWS, COLS) link from earlier links (index into
    the list, 0 is the input) -- ("unary", f, a), ("binary", op, a, b), ("bcast", a, row) adding
    the input's first row or column, ("reduce", kind, a) a row sum/max broadcast back."""
    n = draw(st.integers(2, 9))
    steps = []
    for k in range(1, n + 1):
        a = draw(st.integers(max(0, k - 3), k - 1))
        kind = draw(st.sampled_from(["unary", "unary", "binary", "bcast", "reduce"]))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(["tanh", "sigmoid", "exp_neg", "sq"])), a))
        elif kind == "binary":
            op = draw(st.sampled_from(["add", "mul", "sub"]))
            steps.append(("binary", op, a, draw(st.integers(0, k - 1))))
        elif kind == "bcast":
            steps.append(("bcast", a, draw(st.booleans())))
        else:
            steps.append(("reduce", draw(st.sampled_from(["sum", "max"])), a))
    outs = sorted(set(draw(st.lists(st.integers(1, n), min_size=0, max_size=2))) | {n})
    return steps, outs


_TA_UNARY = {"tanh": ta.tanh, "sigmoid": ta.sigmoid, "exp_neg": lambda v: ta.exp(-v * v),
             "sq": lambda v: v * v}
_NP_UNARY = {"tanh": np.tanh, "sigmoid": lambda v: 1 / (1 + np.exp(-v)), "exp_neg": lambda v: np.exp(-v * v),
             "sq": lambda v: v * v}


def _link(X, s, links, k):
    """One link of :func:`random_chain` (closures made here: ``compute`` reads the index
    arguments off the function's signature)."""
    name = f"L{k + 1}"
    if s[0] == "unary":
        f, P = _TA_UNARY[s[1]], links[s[2]]
        return ta.compute(X.shape, lambda i, j: f(P[i, j]), name=name)
    if s[0] == "binary":
        P, Q = links[s[2]], links[s[3]]
        op = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "sub": lambda a, b: a - b}[s[1]]
        return ta.compute(X.shape, lambda i, j: op(P[i, j], Q[i, j]), name=name)
    if s[0] == "bcast":
        P = links[s[1]]
        if s[2]:
            return ta.compute(X.shape, lambda i, j: P[i, j] + X[0, j] * 0.5, name=name)
        return ta.compute(X.shape, lambda i, j: P[i, j] - X[i, 0] * 0.25, name=name)
    P = links[s[2]]
    r = ta.reduce_axis((0, COLS), f"r{k}")
    reducer = ta.sum if s[1] == "sum" else ta.max
    R = ta.compute((ROWS,), lambda i: reducer(P[i, r], r), name=f"R{k + 1}")
    return ta.compute(X.shape, lambda i, j: P[i, j] * 0.5 + R[i] * 0.125, name=name)


def _build_chain(steps, X):
    links = [X]
    for k, s in enumerate(steps):
        links.append(_link(X, s, links, k))
    return links


def _numpy_chain(steps, x):
    links = [x]
    for s in steps:
        if s[0] == "unary":
            v = _NP_UNARY[s[1]](links[s[2]])
        elif s[0] == "binary":
            a, b = links[s[2]], links[s[3]]
            v = {"add": a + b, "mul": a * b, "sub": a - b}[s[1]]
        elif s[0] == "bcast":
            v = links[s[1]] + x[0][None, :] * 0.5 if s[2] else links[s[1]] - x[:, 0][:, None] * 0.25
        else:
            p = links[s[2]]
            red = p.sum(axis=1) if s[1] == "sum" else p.max(axis=1)
            v = p * 0.5 + red[:, None] * 0.125
        links.append(v)
    return links


@settings(max_examples=16, **SETTINGS)
@given(random_chain(), st.sampled_from([1, 2]), st.sampled_from(["float32", "float64"]))
def test_random_fused_chains_match_numpy_and_evaluate(chain, threads, dtype):
    steps, outs = chain
    X = ta.placeholder((ROWS, COLS), dtype, name="X")
    links = _build_chain(steps, X)
    outputs = [links[k] for k in outs]
    stored = [t for t in links[1:] if t not in outputs]
    x = np.random.default_rng(len(steps)).uniform(-1.5, 1.5, (ROWS, COLS)).astype(dtype)
    kern = ta.build(outputs, [X], materialize=stored, num_threads=threads, parallel_min_work=0)
    got = kern(x)
    got = got if isinstance(got, tuple) else (got,)
    want = _numpy_chain(steps, x.astype(np.float64))
    evaluated = ta.evaluate(outputs, {X: x})
    tol = 1e-4 if dtype == "float32" else 1e-10
    for k, g, e in zip(outs, got, evaluated):
        np.testing.assert_allclose(g, want[k], rtol=tol, atol=tol, err_msg=f"L{k} vs NumPy")
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol, err_msg=f"L{k} vs evaluate")
    fused = ta.lower(outputs, [X], materialize=stored, num_threads=threads, parallel_min_work=0)
    alone = ta.lower(outputs, [X], materialize=stored, num_threads=threads, parallel_min_work=0, fuse=False)
    assert fused.work == alone.work
    assert len(_nests(fused)) <= len(_nests(alone))


def test_nests_of_a_long_program_are_optimized():
    # 20 unfused nests of 16 elements: build time is not bought with run time -- every nest of a
    # long program is optimized like a short program's (the opt level is the user's choice)
    X, L = _chain(20)
    (g,) = ta.gradient(L, [X])
    x = np.linspace(-2, 2, 16)
    long = ta.build([g], [X], fuse=False)
    assert len(_nests(ta.lower([g], [X], fuse=False))) >= 16
    defines = [line for line in long.llvm_ir_unoptimized.splitlines() if line.startswith("define")]
    assert not [line for line in defines if "_nest" in line and "optnone" in line]  # (the glue is optnone)
    np.testing.assert_allclose(long(x), _chain_gradient_reference(x, 20), rtol=1e-12)


def test_a_strip_reduction_reading_another_at_its_rows_shares_its_nest():
    """``S`` sums 2x2 windows in strips of its rows; ``T`` sums the same windows weighted by
    ``S`` at its own point.  The two share one nest over ``(n, y)`` -- per row, ``S``'s pass
    and then ``T``'s, which reads ``S``'s row just made and ``X``'s rows still in cache: one
    parallel region, not two (each a barrier: under load a wait for the other thread).  Before:
    two nests.  Values: NumPy float64, 1 and 2 threads."""
    x = np.random.default_rng(10).standard_normal((3, 16, 64))
    X = ta.placeholder(x.shape, "float64", "X")

    def window(name, f):
        r, s = ta.reduce_axis((0, 2), "r"), ta.reduce_axis((0, 2), "s")
        return ta.compute((3, 8, 32), lambda n, y, c: ta.sum(f(n, y, c, X[n, 2 * y + r, 2 * c + s]), [r, s]),
                          name)
    S = window("S", lambda n, y, c, v: v)
    T = window("T", lambda n, y, c, v: v * S[n, y, c])
    s = x.reshape(3, 8, 2, 32, 2).sum(axis=(2, 4))
    want = (x.reshape(3, 8, 2, 32, 2) * s[:, :, None, :, None]).sum(axis=(2, 4))
    for threads in (1, 2):
        lowered = ta.lower([T], [X], num_threads=threads, parallel_min_work=0)
        assert len(_nests(lowered)) == 1 and "S+T" in lowered.text
        got = ta.build([T], [X], num_threads=threads, parallel_min_work=0)(x)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_strip_reductions_with_epilogues_keep_their_strips_and_chain():
    """A layer norm over the channels of NCHW (ConvNeXt's ``LayerNorm2d``): ``mean`` and
    ``var`` sum ``X[b, k, y, x]`` over ``k`` in strips of ``x`` (contiguous), each with its
    ``/ C`` fused.  Joined in a group over ``(b, y, x)``, the fused units' sums would walk
    ``k`` innermost at a stride of ``H * W`` (46 ms for 8 x 96 x 56 x 56, 8.6x PyTorch); so
    ``var`` chains after ``mean`` per row ``(b, y)``, both in strips.  NumPy float64."""
    n, c, h, w = 2, 12, 5, 16
    x = np.random.default_rng(11).standard_normal((n, c, h, w))
    X = ta.placeholder(x.shape, "float64", "X")
    k, k2 = ta.reduce_axis((0, c), "k"), ta.reduce_axis((0, c), "k2")
    mean = ta.compute((n, h, w), lambda b, y, x_: ta.sum(X[b, k, y, x_], axis=k) / float(c), name="mean")
    var = ta.compute((n, h, w), lambda b, y, x_: ta.sum((X[b, k2, y, x_] - mean[b, y, x_]) ** 2, axis=k2)
                     / float(c), name="var")
    Y = ta.compute((n, c, h, w), lambda b, ch, y, x_: (X[b, ch, y, x_] - mean[b, y, x_])
                   / ta.sqrt(var[b, y, x_] + 1e-5), name="Y")
    lowered = ta.lower([Y], [X], num_threads=1)
    (fused,) = [line for line in lowered.text.splitlines() if "# nest mean" in line]
    assert "fused over (b, y):" in fused, fused
    m = x.mean(axis=1, keepdims=True)
    want = (x - m) / np.sqrt(((x - m) ** 2).mean(axis=1, keepdims=True) + 1e-5)
    for threads in (1, 2):
        got = ta.build([Y], [X], num_threads=threads, parallel_min_work=0)(x)
        np.testing.assert_allclose(got, want, rtol=1e-12)
