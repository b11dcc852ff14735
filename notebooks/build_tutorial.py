"""Writes notebooks/autodiff_tutorial.ipynb from the cells below (run: python notebooks/build_tutorial.py).

The tutorial walks a user's path: a custom layer, its gradient, the work the optimizer removes,
the loops, speed against PyTorch, and training inside PyTorch; every kernel it compiles is run
on data and compared with NumPy or PyTorch.

The notebook is kept as source here so that it reviews as text; the test suite executes the
generated .ipynb from top to bottom through a real Jupyter kernel.
"""

import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
    ("md", """# tensorad in one notebook: a custom layer, from definition to training in PyTorch

tensorad lets you write a layer **element by element** -- "element `[i, j]` of `Y` is this
expression" -- and then derives its gradient as a new program, removes the zeros that
element-wise differentiation creates, and compiles both passes to CPU code through LLVM.

This notebook walks the path you would take with a layer of your own:

1. define a custom layer and run it;
2. get its gradient and read it;
3. see what the optimizer removed, counted by `.work`;
4. read the loops that will run;
5. time it against PyTorch;
6. train it inside a PyTorch training loop.

Every kernel it compiles is checked against NumPy or PyTorch."""),
    ("code", """import time
import numpy as np
import matplotlib.pyplot as plt
import torch
import tensorad as ta

rng = np.random.default_rng(0)
torch.manual_seed(0)

def check(got, want, rtol=1e-4, atol=1e-4):
    \"\"\"Compare with a reference result and say how close it is.\"\"\"
    got, want = np.asarray(got), np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    print(f"matches NumPy (max abs difference {np.max(np.abs(got - want)):.1e})")

def data(t):
    \"\"\"Random data of a placeholder's shape and dtype.\"\"\"
    return rng.standard_normal(t.shape).astype(t.dtype)"""),
    ("md", """## 1. A custom layer

Our layer is a dense layer followed by SiLU, `Y = Z * sigmoid(Z)` with `Z = X W^T + B`.  A
`placeholder` is an input; `compute(shape, f)` defines a tensor whose element at `(i, j)` is
`f(i, j)`; `reduce_axis` is a summation variable.  `ta.topi` holds common operators written in
the same language -- here we write the product by hand to show how."""),
    ("code", """batch, n_in, n_out = 32, 64, 48
X = ta.placeholder((batch, n_in), name="X")
W = ta.placeholder((n_out, n_in), name="W")
Bias = ta.placeholder((n_out,), name="B")
k = ta.reduce_axis((0, n_in), name="k")
Z = ta.compute((batch, n_out), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k) + Bias[j], name="Z")
Y = ta.compute((batch, n_out), lambda i, j: Z[i, j] * ta.sigmoid(Z[i, j]), name="Y")
print(ta.PrintTensorRecursively(Y))"""),
    ("md", """`ta.build(outputs, inputs)` compiles; the kernel takes NumPy arrays in the order of
`inputs`."""),
    ("code", """forward = ta.build([Y], [X, W, Bias])
x, w, b = data(X), data(W), data(Bias)
z = x @ w.T + b
check(forward(x, w, b), z / (1 + np.exp(-z)))"""),
    ("md", """## 2. Its gradient

`ta.JacobianRecursive(Y, inputs, H)` (also called `ta.gradient`) back-propagates a *head* `H`
-- the gradient of some loss with respect to `Y` -- to each input.  The gradients are ordinary
tensors: print them, build them, differentiate them again."""),
    ("code", """H = ta.placeholder(Y.shape, name="H")
dX, dW, dB = ta.JacobianRecursive(Y, [X, W, Bias], H)
print(ta.PrintTensorRecursively(dW))"""),
    ("md", """`dW` is one reduction over the batch, `dW[p, q] = sum_i Z.grad[i, p] * X[i, q]`, where
`Z.grad` is the head times SiLU's derivative: the formula you would write by hand.  Run it and
compare with back-propagation written out in NumPy:"""),
    ("code", """backward = ta.build([dX, dW, dB], [X, W, Bias, H])
h = data(H)
dx, dw, db = backward(x, w, b, h)
s = 1 / (1 + np.exp(-z))
dz = h * (s + z * s * (1 - s))
check(dx, dz @ w)
check(dw, dz.T @ x)
check(db, dz.sum(axis=0))"""),
    ("md", """Without writing the NumPy formula, `ta.gradcheck` compares reverse mode and forward mode with
central finite differences in float64 and returns `True` or raises with the worst mismatch:"""),
    ("code", """Xs = ta.placeholder((3, 4), "float64", name="X")
Ws = ta.placeholder((2, 4), "float64", name="W")
ks = ta.reduce_axis((0, 4), name="k")
Zs = ta.compute((3, 2), lambda i, j: ta.sum(Xs[i, ks] * Ws[j, ks], axis=ks), name="Z")
Ys = ta.compute((3, 2), lambda i, j: Zs[i, j] * ta.sigmoid(Zs[i, j]), name="Y")
print(ta.gradcheck(Ys, [Xs, Ws]))"""),
    ("md", """## 3. What the optimizer removed: `.work`

Differentiating element by element gives the full Jacobian `dZ[i, j] / dW[p, q]`, a 4-d tensor
that is zero except where `j == p`.  Contracting the head with it, `sum_ij H[i, j] J[i, j, p, q]`,
is a correct gradient that sums over all those zeros.  tensorad's optimizer proves where a tensor
can be nonzero and removes the loops over zeros, until the gradient is *zero-free*.

`ta.lower(outputs, inputs)` is the loop program that `build` compiles, and `.work` counts
exactly how many times its innermost bodies run.  Compare the raw route with the optimized
gradient (for the product alone, which `ta.Jacobian` differentiates):"""),
    ("code", """P = ta.topi.nn.dense(X, W)                      # the product X W^T
J = ta.Jacobian(P, W, optimize=False)           # the raw Jacobian, [32, 48, 48, 64]
HP = ta.placeholder(P.shape, name="H")
dW_raw = ta.generalized_matmul(HP, J, 2)        # sum_ij H[i, j] * J[i, j, p, q]
(dW_opt,) = ta.JacobianRecursive(P, [W], HP)
work_raw = ta.lower([dW_raw], [X, W, HP]).work
work_opt = ta.lower([dW_opt], [X, W, HP]).work
print(f"work through the raw Jacobian: {work_raw:,}")
print(f"work of the optimized dW:      {work_opt:,} (= 32 * 48 * 64 = {32 * 48 * 64:,})")
print(f"the optimizer removed {1 - work_opt / work_raw:.4%} of the work")
check(ta.build([dW_raw], [X, W, HP])(x, w, h), h.T @ x)
check(ta.build([dW_opt], [X, W, HP])(x, w, h), h.T @ x)"""),
    ("code", """plt.figure(figsize=(5, 2.5))
plt.bar(["raw Jacobian", "optimized"], [work_raw, work_opt], color=["#999999", "#d62728"])
plt.yscale("log"); plt.ylabel("work (loop-body executions)"); plt.title("dW of a dense layer")
plt.show()"""),
    ("md", """## 4. The loops

Printing a lowered program shows the loops that will run.  Each nest's header gives its work
and how it is compiled.  Here SiLU's derivative is applied inside the nest that computes the
product (`epilogue Z.grad fused`), so `Z` itself is never stored; at larger sizes the products
become packed vector micro-kernels (`emitted as a matrix product`).  `allocate` lines are the
temporaries the kernel stores, and `parallel for` marks the loop split across threads."""),
    ("code", """loops = ta.lower([dX, dW, dB], [X, W, Bias, H])
print(loops)
print("total work:", loops.work)"""),
    ("md", """`.offered` lists, for each nest where there was a choice, the strategies that matched and the
one the cost model chose.  `ta.build(..., tune=True)` measures them instead and keeps the
winners in the disk cache."""),
    ("code", """for point, candidates, chosen in loops.offered:
    print(f"{point:<12} {chosen:<18} (offered: {', '.join(candidates)})")"""),
    ("md", """## 5. Speed against PyTorch

The same layer at a larger size, forward and backward, in tensorad and in PyTorch eager, both on
one thread (on a shared machine a second thread mostly measures the scheduler).  The numbers
depend on your CPU; a ratio below 1 means tensorad is faster."""),
    ("code", """def silu_dense(batch, n_in, n_out):
    X = ta.placeholder((batch, n_in), name="X")
    W = ta.placeholder((n_out, n_in), name="W")
    B = ta.placeholder((n_out,), name="B")
    k = ta.reduce_axis((0, n_in), name="k")
    Z = ta.compute((batch, n_out), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k) + B[j], name="Z")
    Y = ta.compute((batch, n_out), lambda i, j: Z[i, j] * ta.sigmoid(Z[i, j]), name="Y")
    return X, W, B, Y

def median_ms(fn, repeat=15):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); fn(); times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))

Xb, Wb, Bb, Yb = silu_dense(128, 512, 512)
Hb = ta.placeholder(Yb.shape, name="H")
fwd = ta.build([Yb], [Xb, Wb, Bb], num_threads=1)
bwd = ta.build(list(ta.JacobianRecursive(Yb, [Xb, Wb, Bb], Hb)), [Xb, Wb, Bb, Hb], num_threads=1)
xb, wb, bb, hb = data(Xb), data(Wb), data(Bb), data(Hb)

torch.set_num_threads(1)
xt, wt, bt, ht = (torch.from_numpy(a) for a in (xb, wb, bb, hb))
wt.requires_grad_(); bt.requires_grad_(); xt.requires_grad_()
def torch_forward():
    with torch.no_grad():
        return torch.nn.functional.silu(torch.nn.functional.linear(xt, wt, bt))
yt = torch.nn.functional.silu(torch.nn.functional.linear(xt, wt, bt))
def torch_backward():
    return torch.autograd.grad(yt, [xt, wt, bt], ht, retain_graph=True)

check(fwd(xb, wb, bb), torch_forward().numpy(), rtol=1e-3, atol=1e-3)
for mine, theirs in zip(bwd(xb, wb, bb, hb), torch_backward()):
    check(mine, theirs.numpy(), rtol=1e-3, atol=1e-3)

timings = {"forward": (median_ms(lambda: fwd(xb, wb, bb)), median_ms(torch_forward)),
           "backward": (median_ms(lambda: bwd(xb, wb, bb, hb)), median_ms(torch_backward))}
for phase, (mine, theirs) in timings.items():
    print(f"{phase:<8} tensorad {mine:7.3f} ms   PyTorch {theirs:7.3f} ms   ratio {mine / theirs:.2f}")"""),
    ("md", """## 6. Training inside PyTorch

`ta.torch.function(Y, inputs)` makes the layer a PyTorch operator with autograd: its forward
saves what the backward reads, and its backward is tensorad's compiled gradient.  Parameters,
loss, optimizer and data stay ordinary PyTorch.  Here the SiLU layer is the hidden layer of a
small regression network."""),
    ("code", """class SiLUDense(torch.nn.Module):
    \"\"\"silu(x W^T + b), forward and backward compiled by tensorad.\"\"\"

    def __init__(self, batch, n_in, n_out):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(n_out, n_in) / n_in ** 0.5)
        self.bias = torch.nn.Parameter(torch.zeros(n_out))
        X, W, B, Y = silu_dense(batch, n_in, n_out)
        self.fn = ta.torch.function(Y, [X, W, B])

    def forward(self, x):
        return self.fn(x, self.weight, self.bias)

n, d, hidden = 64, 3, 32
model = torch.nn.Sequential(SiLUDense(n, d, hidden), torch.nn.Linear(hidden, 1))
xs = torch.rand(n, d) * 2 - 1
target = (torch.sin(2 * xs[:, 0]) + xs[:, 1] * xs[:, 2]).unsqueeze(1)

# one step against the same network in pure PyTorch
layer = model[0]
reference = torch.nn.functional.silu(torch.nn.functional.linear(xs, layer.weight, layer.bias))
g_ours = torch.autograd.grad(layer(xs).sum(), layer.weight)[0]
g_ref = torch.autograd.grad(reference.sum(), layer.weight)[0]
check(g_ours.numpy(), g_ref.numpy(), rtol=1e-4, atol=1e-5)

opt = torch.optim.Adam(model.parameters(), lr=0.02)
losses = []
for step in range(200):
    loss = torch.nn.functional.mse_loss(model(xs), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
assert losses[-1] < 0.2 * losses[0]"""),
    ("code", """plt.figure(figsize=(5, 3))
plt.plot(losses)
plt.yscale("log"); plt.xlabel("step"); plt.ylabel("mean squared error"); plt.title("training loss")
plt.show()"""),
    ("md", """## 7. Beyond the first derivative

Gradients are tensors of the same language, so forward mode and second order come from the same
machinery.  `ta.jvp(Y, [W], [V])` is the directional derivative along `V`;
`ta.hessian_vector_product(L, [Z], [U])` multiplies the Hessian of a scalar by a vector without
forming the Hessian."""),
    ("code", """V = ta.placeholder(W.shape, name="V")
dY = ta.jvp(P, [W], [V])
v = data(V)
check(ta.build([dY], [X, V])(x, v), x @ v.T)

Zq = ta.placeholder((6,), "float64", name="Z")
Q = ta.placeholder((6, 6), "float64", name="Q")
U = ta.placeholder((6,), "float64", name="U")
i6, j6 = ta.reduce_axis((0, 6), name="i"), ta.reduce_axis((0, 6), name="j")
L = ta.compute((), lambda: ta.sum(Zq[i6] * Q[i6, j6] * Zq[j6], axis=[i6, j6]), name="L")
(HU,) = ta.hessian_vector_product(L, [Zq], [U])
zq, q, u = data(Zq), data(Q), data(U)
check(ta.build([HU], [Zq, Q, U])(zq, q, u), (q + q.T) @ u, rtol=1e-12)"""),
    ("md", """## 8. Looking inside

In Jupyter a lowered program displays as its loops, with each nest's work, and a tensor as its
recursive printout.  `TENSORAD_LOG=passes` (or `with ta.config(log="passes"):`) logs the time
of every compiler stage, and `kernel.export("name.so")` writes a shared library with a C header.
The guides in `docs/` go further: the language, the optimizer, performance, and the errors you
may meet."""),
    ("code", "ta.lower([dX, dW, dB], [X, W, Bias, H])"),
    ("code", "dW"),
]


def main() -> None:
    nb = new_notebook()
    nb.cells = [new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in CELLS]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    out = pathlib.Path(__file__).with_name("autodiff_tutorial.ipynb")
    nbformat.write(nb, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
