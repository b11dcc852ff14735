"""Generic kernels (``kernel.generic``): a program of independent rows over a symbolic batch, built once
(its parts compiled at build time, none at a call) and run at sizes 1 to 1000 and across the block
ladder, forward and raw gradient, weight gradients summed over the blocks, against NumPy formulas in
float64; a sum over the rows read after it is made, or the size read as a value, in stages; programs
whose rows are not independent otherwise keep one static kernel per size and say why; the
last rows run as one short block, a matrix product's too; a Transformer block over a symbolic batch
and sequence length, one generic kernel over the batch per length, against PyTorch float64."""

import pickle
import re

import numpy as np
import pytest

import tensorad as ta

SIZES = (1, 7, 64, 300, 1000)
RNG = np.random.default_rng(1)


def rand(*shape):
    return RNG.standard_normal(shape).astype("float32")


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layer_norm(x, g, b):
    m = x.mean(-1, keepdims=True)
    return (x - m) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b


def dense(x, w, b):
    return x @ w.T + b


def row_loss(x, t):
    """Cross entropy per row: ``logsumexp(x) - <t, x>``."""
    m = x.max(-1)
    return m + np.log(np.exp(x - m[:, None]).sum(-1)) - (t * x).sum(-1)


def _program(case, n):
    X = ta.placeholder((n, 24), name="X")
    if case == "softmax":
        return ta.topi.nn.softmax(X), [X], softmax
    if case == "layer_norm":
        G, B = ta.placeholder((24,), name="G"), ta.placeholder((24,), name="B")
        return ta.topi.nn.layer_norm(X, G, B), [X, G, B], layer_norm
    if case == "dense":
        W, B = ta.placeholder((10, 24), name="W"), ta.placeholder((10,), name="B")
        return ta.topi.nn.dense(X, W, B), [X, W, B], dense
    T = ta.placeholder((n, 24), name="T")
    k = ta.reduce_axis((0, 24), "k")
    m = ta.compute((n,), lambda i: ta.max(X[i, k], axis=k), name="m")
    k2 = ta.reduce_axis((0, 24), "k2")
    s = ta.compute((n,), lambda i: ta.sum(ta.exp(X[i, k2] - m[i]), axis=k2), name="s")
    k3 = ta.reduce_axis((0, 24), "k3")
    return ta.compute((n,), lambda i: m[i] + ta.log(s[i]) - ta.sum(T[i, k3] * X[i, k3], axis=k3),
                      name="loss"), [X, T], row_loss


def _central_gradient(f, values, h, eps=1e-6):
    """d sum(f(values) * h) / d values[0], by float64 central differences."""
    x = values[0].astype("float64")
    rest = [v.astype("float64") for v in values[1:]]
    grad = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        up, down = x.copy(), x.copy()
        up[idx] += eps
        down[idx] -= eps
        grad[idx] = ((f(up, *rest) - f(down, *rest)) * h).sum() / (2 * eps)
    return grad



@pytest.mark.parametrize("case", ["softmax", "layer_norm", "dense", "row_loss"])
def test_generic_kernel_built_once_runs_every_size(case, builds):
    n = ta.size_var("n")
    Y, inputs, oracle = _program(case, n)
    H = ta.placeholder(Y.shape, name="H")
    (dX,) = ta.JacobianRecursive(ta.topi.sum(Y * H), inputs[:1], optimize=False)
    forward, backward = ta.build(Y, inputs), ta.build(dX, [*inputs, H])
    assert forward.generic and backward.generic
    assert ta.lower(Y, inputs).generic and ta.lower(dX, [*inputs, H]).why == ""
    compiled = len(builds)
    assert compiled == len(forward.parts) + len(backward.parts) == 10  # blocks of 256, 64, 8, 4 and 1 rows
    for size in SIZES:
        values = [rand(size, *t.shape[1:]) if t.shape[0] is n else rand(*t.shape) for t in inputs]
        want = oracle(*(v.astype("float64") for v in values))
        np.testing.assert_allclose(forward(*values), want, rtol=1e-4, atol=1e-5)
        h = rand(*want.shape)
        got = backward(*values, h)
        assert got.shape == (size, 24)
        if size <= 7:  # (central differences cost a forward per element)
            np.testing.assert_allclose(got, _central_gradient(oracle, values, h), rtol=1e-4, atol=1e-4)
    assert len(builds) == compiled  # no size compiles
    assert all(forward.bounded) and forward.why == ""  # (each block runs the rows it is given)
    for size in (1, 7, 300):
        blocks = forward.blocks(size)
        assert sum(c * rows for c, (rows, _) in zip(blocks, forward.parts)) >= size
        assert forward.work_at(size) >= ta.lower(*_program(case, size)[:2]).work


@pytest.mark.parametrize("case", ["layer_norm", "dense"])
def test_work_at_a_count_of_rows_is_the_static_programs(case):
    """``kernel.work_at(n)`` equals the work of the static program of ``n`` rows where the call's last
    block runs short (a block of 8, 64 or 256 rows on 7, 9 or 67) as where whole blocks run every row:
    a short block's loops over rows run its rows only."""
    n = ta.size_var("n")
    kernel = ta.build(*_program(case, n)[:2])
    for size in (1, 7, 9, 67, 300, 1000):
        assert kernel.work_at(size) == ta.lower(*_program(case, size)[:2]).work
    for size in (9, 67):  # (each ends in a short block)
        assert sum(c * rows for c, (rows, _) in zip(kernel.blocks(size), kernel.parts)) > size


def test_gradient_across_blocks_matches_softmax_formula():
    """At 1000 rows (three blocks of 256, three of 64, five of 8) each row's raw gradient is its own."""
    n = ta.size_var("n")
    Y, (X,), _ = _program("softmax", n)
    H = ta.placeholder(Y.shape, name="H")
    kernel = ta.build(ta.JacobianRecursive(ta.topi.sum(Y * H), [X], optimize=False), [X, H])
    x, h = rand(1000, 24), rand(1000, 24)
    s = softmax(x.astype("float64"))
    np.testing.assert_allclose(kernel(x, h), s * (h - (h * s).sum(-1, keepdims=True)), rtol=1e-4, atol=1e-6)


def test_unit_of_a_multiple_of_size_ends_the_ladder():
    n = ta.size_var("n", multiple_of=4, max=64)
    X = ta.placeholder((n, 3), name="X")
    kernel = ta.build(ta.compute((n, 3), lambda i, j: X[i, j] * 2.0 + 1.0, name="Y"), [X])
    assert kernel.generic and [rows for rows, _ in kernel.parts] == [64, 8, 4]
    for size in (4, 12, 36, 64):
        x = rand(size, 3)
        np.testing.assert_allclose(kernel(x), x * 2.0 + 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="size n = 6 is not a multiple of 4"):
        kernel(rand(6, 3))
    with pytest.raises(ValueError, match=r"size n = 68 is outside its admissible range \[1, 64\]"):
        kernel(rand(68, 3))


def test_generic_kernel_pickles_and_runs_on_threads():
    n = ta.size_var("n")
    Y, inputs, oracle = _program("layer_norm", n)
    kernel = pickle.loads(pickle.dumps(ta.build(Y, inputs)))
    kernel.num_threads = 2
    assert kernel.generic and kernel.num_threads == 2
    values = [rand(300, 24), rand(24), rand(24)]
    np.testing.assert_allclose(kernel(*values), oracle(*(v.astype("float64") for v in values)), rtol=1e-4,
                               atol=1e-5)


def test_generic_kernel_checks_arrays_against_each_other_and_their_shapes():
    n = ta.size_var("n")
    X, V = ta.placeholder((n, 4), name="X"), ta.placeholder((n,), name="V")
    kernel = ta.build(ta.compute((n, 4), lambda i, j: X[i, j] * V[i], name="Y"), [X, V])
    assert kernel.generic
    with pytest.raises(ValueError, match=r"disagree on size n: X gives 3, V gives 2"):
        kernel(rand(3, 4), rand(2))
    with pytest.raises(ta.codegen.KernelArgumentError, match=r"X: expected shape \[3, 4\], got \[3, 5\]"):
        kernel(rand(3, 5), rand(3))
    with pytest.raises(ta.codegen.KernelArgumentError, match="expected dtype float32"):
        kernel(rand(3, 4).astype("float64"), rand(3))
    x, v, y = rand(37, 4), rand(37), np.empty((37, 4), np.float32)
    assert kernel(x, v, out=y) is y
    np.testing.assert_allclose(y, x * v[:, None], rtol=1e-6)
    with pytest.raises(ta.codegen.KernelArgumentError,
                       match=r"out Y: expected shape \[37, 4\], got \[36, 4\]"):
        kernel(x, v, out=y[:36])
    with pytest.raises(ta.codegen.KernelArgumentError, match="overlaps"):
        kernel(x, v, out=x)


@pytest.mark.parametrize("body, why", [
    (lambda X, n: ta.compute((n, 4), lambda i, j: X[0, j], name="Y"), "other than at its row"),
    (lambda X, n: ta.compute((n, 4), lambda i, j: X[i, j] * i, name="Y"), "row index as a value"),
    (lambda X, n: ta.compute((n - 1, 4), lambda i, j: X[i + 1, j], name="Y"),
     "past the leading extent|as its rows"),
])
def test_rows_that_are_not_independent_build_per_size_and_say_why(body, why):
    n = ta.size_var("n")
    X = ta.placeholder((n, 4), name="X")
    Y = body(X, n)
    kernel = ta.build(Y, [X])
    assert not kernel.generic and kernel.why
    assert re.search(why, kernel.why), kernel.why
    lowered = ta.lower(Y, [X])  # (says the same before anything compiles)
    assert not lowered.generic and lowered.why == kernel.why
    x = rand(5, 4)
    np.testing.assert_allclose(kernel(x), ta.evaluate(Y, {X: x}), rtol=1e-5)


@pytest.mark.parametrize("optimize", [False, True])
def test_weight_gradients_sum_over_the_blocks(optimize):
    """A dense layer's gradient with respect to its weight and bias sums over the rows: each block's
    sum is added (the optimized gradient is the one of each block's static program)."""
    n = ta.size_var("n")
    Y, (X, W, B), _ = _program("dense", n)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(ta.topi.sum(Y * H), [X, W, B], optimize=optimize)
    kernel = ta.build(grads, [X, W, B, H])
    loss = ta.build(ta.topi.sum(Y * H), [X, W, B, H])
    assert kernel.generic and loss.generic
    assert all(kernel.bounded) and all(loss.bounded)
    w = rand(10, 24)
    for size in (1, 7, 300, 1000):
        x, b, h = rand(size, 24), rand(10), rand(size, 10)
        x64, h64 = x.astype("float64"), h.astype("float64")
        dx, dw, db = kernel(x, w, b, h)
        np.testing.assert_allclose(dx, h64 @ w, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(dw, h64.T @ x64, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(db, h64.sum(0), rtol=1e-4, atol=1e-4)
        terms = (x64 @ w.T + b) * h64  # (a float32 sum of them rounds by up to a few eps of their sizes)
        np.testing.assert_allclose(loss(x, w, b, h), terms.sum(), rtol=1e-4, atol=1e-6 * np.abs(terms).sum())


def test_sum_over_rows_at_every_count_of_rows_from_none():
    """The first block writes a sum over the rows, each later one adds to it; no rows give zeros."""
    n = ta.size_var("n", min=0)
    X = ta.placeholder((n, 3), name="X")
    k = ta.reduce_axis((0, n), "k")
    kernel = ta.build(ta.compute((3,), lambda j: ta.sum(X[k, j] * X[k, j], axis=k), name="total"), [X])
    assert kernel.generic and all(kernel.bounded)
    for size in (0, 1, 4, 5, 37, 300):
        x = rand(size, 3)
        np.testing.assert_allclose(kernel(x), (x.astype("float64") ** 2).sum(0), rtol=1e-5, atol=1e-6)


def test_mean_over_the_batch_is_one_kernel_in_stages():
    """A mean over the batch (a sum over the rows divided by ``n``) and rows that read it (``X - mean``)
    are stages of generic kernels: the sum made by the first, read by the second, ``n`` read at run
    time; ``ta.lower`` says the same before anything compiles."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 4), name="X")
    k = ta.reduce_axis((0, n), "k")
    mean = ta.compute((4,), lambda j: ta.sum(X[k, j], axis=k) / n, name="mean")
    Y = ta.compute((n, 4), lambda i, j: (X[i, j] - mean[j]) / n, name="Y")
    kernel = ta.build([mean, Y], [X])
    assert kernel.generic and kernel.why == "" and all(kernel.bounded)
    lowered = ta.lower([mean, Y], [X])
    assert lowered.generic and lowered.why == ""
    for size in (1, 2, 7, 17, 64, 300, 1000):
        x = rand(size, 4)
        m, y = kernel(x)
        want = x.astype("float64").mean(0)
        np.testing.assert_allclose(m, want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(y, (x - want) / size, rtol=1e-5, atol=1e-6)


def test_sum_read_by_another_op_is_one_kernel_in_stages():
    """Pickled, it runs as it did; arrays that disagree on the size are an error naming both."""
    n = ta.size_var("n")
    X, V = ta.placeholder((n, 4), name="X"), ta.placeholder((n,), name="V")
    k = ta.reduce_axis((0, n), "k")
    total = ta.compute((4,), lambda j: ta.sum(X[k, j] * V[k], axis=k), name="total")
    kernel = ta.build(ta.compute((4,), lambda j: total[j] * total[j], name="square"), [X, V])
    assert kernel.generic and kernel.why == ""
    for size in (1, 7, 300):
        x, v = rand(size, 4), rand(size)
        np.testing.assert_allclose(kernel(x, v), (x.astype("float64") * v[:, None]).sum(0) ** 2, rtol=1e-4)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(kernel))(x, v), kernel(x, v))
    with pytest.raises(ValueError, match="disagree on size n: X gives 300, V gives 7"):
        kernel(x, v[:7])


DIM, HEADS, HIDDEN = 8, 2, 16
BLOCK_PARAMS = {"G1": (DIM,), "B1": (DIM,), "Wq": (DIM, DIM), "Wk": (DIM, DIM), "Wv": (DIM, DIM),
                "Wo": (DIM, DIM), "G2": (DIM,), "B2": (DIM,), "W1": (DIM, HIDDEN), "C1": (HIDDEN,),
                "W2": (HIDDEN, DIM)}


def transformer_block(X, p):
    """A pre-norm Transformer block written once in ``ta.topi`` over ``X [batch, length, DIM]``: causal
    multi-head self-attention, then a GELU MLP, each with its residual."""
    topi, nn = ta.topi, ta.topi.nn
    b, n, d = X.shape

    def heads(t):  # [b, n, d] -> [b, heads, n, d / heads]
        return topi.transpose(topi.reshape(t, (b, n, HEADS, d // HEADS)), (0, 2, 1, 3))
    h = nn.layer_norm(X, p["G1"], p["B1"])
    q, k, v = (heads(topi.matmul(h, p[w])) for w in ("Wq", "Wk", "Wv"))
    a = nn.scaled_dot_product_attention(q, k, v, causal=True)
    x = X + topi.matmul(topi.reshape(topi.transpose(a, (0, 2, 1, 3)), (b, n, d)), p["Wo"])
    h = nn.gelu(topi.matmul(nn.layer_norm(x, p["G2"], p["B2"]), p["W1"]) + p["C1"])
    return x + topi.matmul(h, p["W2"])


def torch_block(torch, x, p):
    """The same block in PyTorch (float64)."""
    F = torch.nn.functional
    b, n, d = x.shape

    def heads(t):
        return t.reshape(b, n, HEADS, d // HEADS).transpose(1, 2)
    h = F.layer_norm(x, (d,), p["G1"], p["B1"])
    a = F.scaled_dot_product_attention(*(heads(h @ p[w]) for w in ("Wq", "Wk", "Wv")), is_causal=True)
    x = x + a.transpose(1, 2).reshape(b, n, d) @ p["Wo"]
    return x + F.gelu(F.layer_norm(x, (d,), p["G2"], p["B2"]) @ p["W1"] + p["C1"]) @ p["W2"]


@pytest.mark.slow
def test_transformer_block_over_batch_and_sequence_length_matches_pytorch(builds):
    """One definition over a symbolic batch ``b`` (of at most 8: blocks of 8, 4 and 1 rows) and sequence
    length ``L``: forward and every gradient of ``sum(Y * H)`` match PyTorch float64 at one row, a short
    block and a full one; the kernels are generic over ``b`` (one compile serves every batch at a length)
    and compile once per length, the causal attention's rows depending on each other along ``L``."""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    b, L = ta.size_var("b", max=8), ta.size_var("L")
    X = ta.placeholder((b, L, DIM), name="X")
    params = {k: ta.placeholder(s, name=k) for k, s in BLOCK_PARAMS.items()}
    Y = transformer_block(X, params)
    H = ta.placeholder(Y.shape, name="H")
    grads = ta.JacobianRecursive(ta.topi.sum(Y * H), [X, *params.values()])
    forward, backward = ta.build(Y, [X, *params.values()]), ta.build(grads, [X, *params.values(), H])
    for k in (forward, backward):
        assert not k.generic and k.why.startswith("rows are independent along b, not along L")
    assert ta.lower(Y, [X, *params.values()]).why == forward.why
    values = {k: (RNG.standard_normal(s) * 0.5).astype("float32") for k, s in BLOCK_PARAMS.items()}
    for batch, length in ((1, 1), (7, 1), (8, 5), (3, 5)):
        x, h = rand(batch, length, DIM), rand(batch, length, DIM)
        tx = torch.tensor(x, dtype=torch.float64, requires_grad=True)
        tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in values.items()}
        want = torch_block(torch, tx, tp)
        want.backward(torch.tensor(h, dtype=torch.float64))
        np.testing.assert_allclose(forward(x, *values.values()), want.detach().numpy(), rtol=1e-4, atol=1e-4)
        for got, t in zip(backward(x, *values.values(), h), [tx, *tp.values()]):
            np.testing.assert_allclose(got, t.grad.numpy(), rtol=1e-3, atol=1e-3)
    made = [k.at(b=1, L=length) for k in (forward, backward) for length in (1, 5)]
    assert all(k.generic and k.parts[0][0] == 8 and k.parts[-1][0] == 1 for k in made)
    assert any(k.blocks(size)[0] == 1 for k in made for size in (3, 7))  # (a short block of 8 rows)
    # each kernel's smallest block runs exactly the rows it is given (a larger one that takes no count
    # runs whole blocks only)
    assert all(k.bounded[-1] for k in made), [k.why for k in made]
    assert len(builds) == sum(len(k.parts) for k in made)  # (a block whose rows take no count: left out)


def test_products_over_rows_keep_their_rows_their_sums_and_whole_outputs():
    """A product with a 1 MB weight, which each block reads again: the last rows run as one short block
    (no padded one: ``kernel.why`` is empty), each output row its own row's, the weight's gradient the
    sum over the real rows, an output without rows the one every block writes."""
    n = ta.size_var("n")
    X, W = ta.placeholder((n, 256), name="X"), ta.placeholder((1024, 256), name="W")
    k = ta.reduce_axis((0, 256), "k")
    Y = ta.compute((n, 1024), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k), name="Y")
    Z = ta.compute((4,), lambda j: W[j, 0] * 3.0, name="Z")
    H = ta.placeholder(Y.shape, name="H")
    forward = ta.build([Y, Z], [X, W])
    backward = ta.build(ta.JacobianRecursive(ta.topi.sum(Y * H), [X, W]), [X, W, H])
    assert forward.generic and backward.generic and forward.why == backward.why == ""
    w = rand(1024, 256)
    for size in (2, 7, 40, 300):
        for kernel in (forward, backward):
            assert all(kernel.bounded)
        x, h = rand(size, 256), rand(size, 1024)
        y, z = forward(x, w)
        np.testing.assert_allclose(y, x.astype("float64") @ w.T, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(z, w[:4, 0] * 3.0, rtol=1e-6)
        given = np.empty((size, 256), np.float32), np.empty((1024, 256), np.float32)
        for dx, dw in (backward(x, w, h), backward(x, w, h, out=given)):
            np.testing.assert_allclose(dx, h.astype("float64") @ w, rtol=1e-4, atol=1e-3)
            np.testing.assert_allclose(dw, h.T.astype("float64") @ x, rtol=1e-4, atol=1e-3)


def test_sum_of_exponentials_over_rows_counts_the_given_rows():
    """``sum_k exp(X[k, j])``: a row past the count would add ``exp`` of it; each block runs the rows it
    is given."""
    n = ta.size_var("n")
    X = ta.placeholder((n, 3), name="X")
    k = ta.reduce_axis((0, n), "k")
    kernel = ta.build(ta.compute((3,), lambda j: ta.sum(ta.exp(X[k, j]), axis=k), name="total"), [X])
    assert kernel.generic and all(kernel.bounded)
    for size in (3, 7, 37):
        x = rand(size, 3)
        np.testing.assert_allclose(kernel(x), np.exp(x.astype("float64")).sum(0), rtol=1e-5)


def _max_pool3s2_grad(n):
    """The gradient of a 3x3 max pool of stride 2 padded by 1 over ``n`` images, and its inputs."""
    X = ta.placeholder((n, 3, 9, 9), name="X")
    Y = ta.topi.nn.pool(X, [3, 3], [2, 2], [1, 1, 1, 1], "max")
    H = ta.placeholder(Y.shape, name="H")
    return ta.JacobianRecursive(ta.topi.sum(Y * H), [X])[0], [X, H]


def _nests(lowered):
    return [(s.name, s.note, s.parallel, s.work) for s in lowered.program.steps
            if getattr(s, "work", 0)]


def test_padded_max_pool_gradient_blocks_keep_the_static_plan():
    """Each block of the generic padded max pool gradient lowers to the static program of its rows (the
    same nests, notes, parallel loops and work, its loops over rows taking the count), its work at a
    count of rows is the static program's, and it scatters each window's gradient to the window's
    largest element, as a NumPy loop over the windows does."""
    dX, ins = _max_pool3s2_grad(ta.size_var("n"))
    kernel = ta.build(dX, ins)
    assert kernel.generic and kernel.why == "" and all(kernel.bounded)
    for rows, part in kernel.parts:
        assert _nests(part.lowered) == _nests(ta.lower(*_max_pool3s2_grad(rows)))
    for size in (1, 7, 9, 300):
        assert kernel.work_at(size) == ta.lower(*_max_pool3s2_grad(size)).work
    x, h = rand(9, 3, 9, 9), rand(9, 3, 5, 5)
    padded = np.pad(x.astype("float64"), [(0, 0), (0, 0), (1, 1), (1, 1)], constant_values=-np.inf)
    want = np.zeros_like(padded)
    for b, c, i, j in np.ndindex(*h.shape):
        window = padded[b, c, 2 * i:2 * i + 3, 2 * j:2 * j + 3]
        r, s = np.unravel_index(np.argmax(window), (3, 3))
        want[b, c, 2 * i + r, 2 * j + s] += h[b, c, i, j]
    np.testing.assert_allclose(kernel(x, h), want[:, :, 1:-1, 1:-1], rtol=1e-5, atol=1e-6)
