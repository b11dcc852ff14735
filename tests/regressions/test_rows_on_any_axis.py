"""A generic kernel whose computed tensors hold the rows on any axis: the optimizer may lay a tensor of
the program out with the symbolic size on a middle axis (a causal attention's column sums as
``[length, n, heads]``), and a scatter over the rows (an embedding's gradient) stores at a row read
from data.  Each compiles once for every size, runs the given rows only, and matches NumPy float64 (a
Transformer block's gradients, PyTorch float64); bad sizes are clear errors."""

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

import tensorad as ta
from fuzz.cheap import pinned

RNG = np.random.default_rng(3)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)



def _middle(n):
    """``Y[i] = sum_{j, k} T[j, i, k]`` over ``T[j, i, k] = X[i, j] * W[k]``, whose rows are its middle
    axis."""
    X, W = ta.placeholder((n, 5), name="X"), ta.placeholder((3,), name="W")
    T = ta.compute((5, n, 3), lambda j, i, k: ta.exp(X[i, j]) * W[k], name="T")
    j, k = ta.reduce_axis((0, 5), "j"), ta.reduce_axis((0, 3), "k")
    Y = ta.compute((n,), lambda i: ta.sum(T[j, i, k] * X[i, j], axis=[j, k]), name="Y")
    return X, W, Y


def test_rows_on_a_middle_axis_compile_once(builds):
    X, W, Y = _middle(ta.size_var("n"))
    assert ta.lower(Y, [X, W]).generic
    kernel = ta.build(Y, [X, W])
    assert kernel.generic and kernel.why == "" and all(kernel.bounded)
    compiled = len(builds)
    w = rand(3)
    for size in (1, 7, 64, 1000):
        x = np.full((size + 2, 5), np.nan, np.float32)
        x[:size] = rand(size, 5)
        x64 = x[:size].astype(np.float64)
        want = (np.exp(x64) * x64).sum(1) * w.astype(np.float64).sum()
        np.testing.assert_allclose(kernel(x[:size], w), want, rtol=1e-5, atol=1e-5)
    assert len(builds) == compiled
    with pytest.raises(ValueError, match="size n = 0 is outside its admissible range"):
        kernel(np.zeros((0, 5), np.float32), w)


def test_an_argument_with_rows_past_its_leading_axis_compiles_per_size():
    n = ta.size_var("n")
    X = ta.placeholder((n, 5), name="X")
    Y = ta.compute((5, n), lambda j, i: X[i, j] * 2.0, name="Y")
    kernel = ta.build(Y, [X])
    assert not kernel.generic
    assert "Y: an argument with size n in its shape (5, n) past the front" in kernel.why
    x = rand(7, 5)
    np.testing.assert_allclose(kernel(x), x.T * 2.0)


def test_a_scatter_over_the_rows_takes_the_count_of_rows():
    """An embedding's gradient adds each row's head at the row of ``E`` its token names: its store's
    position reads a row of data, not an axis of rows, so each block runs the rows it is given."""
    n = ta.size_var("n")
    E, T = ta.placeholder((11, 6), name="E"), ta.placeholder((n, 3), "int32", name="T")
    Y = ta.topi.nn.embedding(E, T)
    H = ta.placeholder(Y.shape, name="H")
    (dE,) = ta.JacobianRecursive(ta.topi.sum(Y * H), [E])
    kernel = ta.build(dE, [E, T, H])
    assert kernel.generic and kernel.why == "" and all(kernel.bounded)
    for size in (1, 7, 64, 300):
        t = RNG.integers(0, 11, (size, 3)).astype(np.int32)
        h = rand(size, 3, 6)
        want = np.zeros((11, 6))
        np.add.at(want, t.reshape(-1), h.reshape(-1, 6).astype(np.float64))
        np.testing.assert_allclose(kernel(rand(11, 6), t, h), want, rtol=1e-5, atol=1e-5)



def _products(lowered) -> list[tuple[int, int, int, int]]:
    """The batch points, rows, columns and sum of each matrix product of a lowered program."""
    return [(g.batches, g.M, g.N, g.K) for s in lowered.program.steps
            if (g := getattr(getattr(s, "attrs", None), "gemm", None)) is not None]


def _conv_relu_grads(n):
    """The gradients of ``sum(relu(conv3x3(X, W)) * H)`` over 64 channels of 8 x 8 (Winograd's in a block of
    64 rows)."""
    X, W = ta.placeholder((n, 64, 8, 8), name="X"), ta.placeholder((64, 64, 3, 3), name="W")
    Y = ta.topi.nn.relu(ta.topi.nn.conv2d(X, W, 1, 1))
    H = ta.placeholder(Y.shape, name="H")
    return ta.JacobianRecursive(ta.topi.sum(Y * H), [X, W]), [X, W, H]


@pytest.mark.slow
def test_a_winograd_gradient_runs_the_count_of_rows():
    """A convolution's Winograd gradient reaches the rows as the first column axis of its input gradient's
    product and sums them into its weight gradient's product, whose sums an output transform maps
    linearly into the weight gradient: every block takes the count of rows and runs, at a count of its
    rows, the static program's work (pinned target: the cost model's choice of Winograd), matching NumPy
    float64.  Each product of a block is the static program's of its rows, its columns the count of
    them (it was a product per row, each a few columns wide: 1.3x the static kernel's time)."""
    target = pinned("llvm -mcpu=haswell")
    kernel = ta.build(*_conv_relu_grads(ta.size_var("n")), target=target)
    assert kernel.why == "" and all(kernel.bounded)
    rows, part = kernel.parts[1]
    assert any("wino_m" in name for name in part.lowered.text.split())
    static = ta.lower(*_conv_relu_grads(rows), target=target)
    assert _products(part.lowered) == _products(static) and len(_products(static)) >= 3
    w = rand(64, 64, 3, 3) * 0.1
    for size in (3, 70):
        assert kernel.work_at(size) == ta.lower(*_conv_relu_grads(size), target=target).work
        x = rand(size, 64, 8, 8)
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        windows = sliding_window_view(np.pad(x64, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
        z = np.einsum("ncyxij,fcij->nfyx", windows, w64)
        h = rand(size, 64, 8, 8) * (np.abs(z) > 1e-3)  # (no point at the kink of the relu)
        g = h.astype(np.float64) * (z > 0)
        dw = np.einsum("nfyx,ncyxij->fcij", g, windows)
        gw = sliding_window_view(np.pad(g, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
        dx = np.einsum("nfyxij,fcij->ncyx", gw, w64[:, :, ::-1, ::-1])
        got_dx, got_dw = kernel(x, w, h)
        np.testing.assert_allclose(got_dx, dx, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got_dw, dw, rtol=1e-4, atol=1e-3)


LENGTH, DIM, HEADS, VOCAB = 8, 16, 2, 13
SHAPES = {"E": (VOCAB, DIM), "g1": (DIM,), "b1": (DIM,), "Wq": (DIM, DIM), "Wk": (DIM, DIM),
          "Wv": (DIM, DIM), "Wo": (DIM, DIM), "g2": (DIM,), "b2": (DIM,), "W1": (DIM, 4 * DIM),
          "c1": (4 * DIM,), "W2": (4 * DIM, DIM), "Wout": (DIM, VOCAB)}


def _block(tokens, labels, p):
    """A pre-norm Transformer block with its loss: embedding, causal attention, GELU MLP, the mean
    cross-entropy of the next token."""
    topi, nn = ta.topi, ta.topi.nn
    b, n = tokens.shape

    def split(t):
        return topi.transpose(topi.reshape(t, (b, n, HEADS, DIM // HEADS)), (0, 2, 1, 3))
    x = nn.embedding(p["E"], tokens)
    h = nn.layer_norm(x, p["g1"], p["b1"])
    a = nn.scaled_dot_product_attention(*(split(topi.matmul(h, p[w])) for w in ("Wq", "Wk", "Wv")),
                                        causal=True)
    x = x + topi.matmul(topi.reshape(topi.transpose(a, (0, 2, 1, 3)), (b, n, DIM)), p["Wo"])
    h = nn.gelu(topi.matmul(nn.layer_norm(x, p["g2"], p["b2"]), p["W1"]) + p["c1"])
    x = x + topi.matmul(h, p["W2"])
    return nn.cross_entropy(topi.matmul(x, p["Wout"]), labels)


def _torch_block(torch, tokens, labels, p):
    F = torch.nn.functional
    b, n = tokens.shape

    def split(t):
        return t.reshape(b, n, HEADS, DIM // HEADS).transpose(1, 2)
    x = p["E"][tokens]
    h = F.layer_norm(x, (DIM,), p["g1"], p["b1"])
    a = F.scaled_dot_product_attention(*(split(h @ p[w]) for w in ("Wq", "Wk", "Wv")), is_causal=True)
    x = x + a.transpose(1, 2).reshape(b, n, DIM) @ p["Wo"]
    x = x + F.gelu(F.layer_norm(x, (DIM,), p["g2"], p["b2"]) @ p["W1"] + p["c1"]) @ p["W2"]
    return F.cross_entropy((x @ p["Wout"]).reshape(b * n, VOCAB), labels.reshape(-1))


@pytest.mark.slow
def test_a_transformer_block_with_its_loss_over_a_batch_and_a_length_compiles_once_for_every_batch(builds):
    """The block's mean loss over a symbolic batch ``b`` and length ``L`` reads ``1 / (b * L)`` and its
    sums over the rows after they are made: at a length, one staged kernel over ``b`` (its loss and every
    gradient matching PyTorch float64 at each batch), not one compile per batch.  At ``LENGTH`` the
    gradient lays a causal attention's column sums out as ``[LENGTH, b, heads]``, the rows on a middle
    axis.  (One length: a compile at each is most of this test's CPU; a block over ``b`` and ``L`` built
    at two lengths, one of them 1, where each token attends to itself only, is
    tests/codegen/test_generic_kernels.py's Transformer test.)"""
    torch = pytest.importorskip("torch", reason="an optional extra; make test requires it")
    b, L = ta.size_var("b"), ta.size_var("L")
    tokens, labels = (ta.placeholder((b, L), "int32", name=k) for k in ("tokens", "labels"))
    p = {k: ta.placeholder(s, name=k) for k, s in SHAPES.items()}
    loss = _block(tokens, labels, p)
    grads = ta.JacobianRecursive(loss, list(p.values()))
    ins = [tokens, labels, *p.values()]
    forward, backward = ta.build(loss, ins), ta.build(grads, ins)
    for k, program in ((forward, loss), (backward, grads)):
        assert k.why == ta.lower(program, ins).why == \
            "rows are independent along b, not along L: a generic kernel over b for each value of L"
    values = {k: (rand(*s) * 0.3).astype(np.float32) for k, s in SHAPES.items()}
    values["g1"], values["g2"] = 1 + values["g1"], 1 + values["g2"]
    compiled = None
    for size in (1, 7, 64, 300):
        t, y = (RNG.integers(0, VOCAB, (size, LENGTH)).astype(np.int32) for _ in range(2))
        tp = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True) for k, v in values.items()}
        want = _torch_block(torch, *(torch.tensor(a, dtype=torch.long) for a in (t, y)), tp)
        want.backward()
        np.testing.assert_allclose(forward(t, y, *values.values()), want.item(), rtol=1e-4)
        for got, (k, w) in zip(backward(t, y, *values.values()), tp.items()):
            np.testing.assert_allclose(got, w.grad.numpy(), rtol=2e-3, atol=2e-5, err_msg=f"{k}, {size}")
        compiled = len(builds) if compiled is None else compiled
        assert len(builds) == compiled, f"a batch of {size} compiled"
    assert forward.at(L=LENGTH).generic and backward.at(L=LENGTH).generic
