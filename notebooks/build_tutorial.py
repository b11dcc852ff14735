"""Writes notebooks/autodiff_tutorial.ipynb from the cells below (run: python notebooks/build_tutorial.py).

The tutorial builds up from a first ``compute`` to a training loop; every kernel it compiles is
run on data and compared with NumPy (or ``ta.evaluate``).

The notebook is kept as source here so that it reviews as text; the test suite executes the
generated .ipynb from top to bottom through a real Jupyter kernel.
"""

import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
    ("md", """# Automatic differentiation of tensor expressions with tensorad

tensorad lets you write a tensor computation **element by element** -- "element `[i, j]` of `Y`
is this expression of other tensors' elements" -- and then

* computes its derivatives (reverse mode, forward mode, second order) as new tensors of the
  same language,
* removes the zeros that naive differentiation creates (the *nonzeroness optimizer*),
* compiles any tensor to fast CPU code through LLVM.

This notebook builds up from one tensor to a small training loop.  Every kernel it compiles is
run on data and compared with NumPy."""),
    ("code", """import time
import numpy as np
import matplotlib.pyplot as plt
import tensorad as ta

rng = np.random.default_rng(0)

def check(got, want, rtol=1e-4, atol=1e-5):
    \"\"\"Compare with the NumPy result and say how close it is.\"\"\"
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    print(f"matches NumPy (max abs difference {np.max(np.abs(np.asarray(got) - want)):.1e})")

def data(t):
    \"\"\"Random float32 (or float64) data of a placeholder's shape.\"\"\"
    return rng.standard_normal(t.shape).astype(t.dtype)"""),
    ("md", """## 1. A first compute

A `placeholder` is an input; `compute(shape, f)` defines a tensor whose element at index
`(i, j)` is `f(i, j)`.  `ta.build(outputs, inputs)` compiles it; the kernel takes NumPy arrays."""),
    ("code", """A = ta.placeholder((3, 4), name="A")
B = ta.compute((3, 4), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
print(B)

double_plus_one = ta.build([B], [A])
a = data(A)
check(double_plus_one(a), a * 2 + 1)"""),
    ("md", """## 2. Reductions

`reduce_axis((lo, hi))` is a summation variable; `ta.sum(expr, axis=k)` sums over it.  A
matrix product is one line."""),
    ("code", """M = ta.placeholder((5, 7), name="M")
N = ta.placeholder((7, 3), name="N")
k = ta.reduce_axis((0, 7), name="k")
P = ta.compute((5, 3), lambda i, j: ta.sum(M[i, k] * N[k, j], axis=k), name="P")
print(ta.PrintTensorRecursively(P))
m, n = data(M), data(N)
check(ta.build([P], [M, N])(m, n), m @ n)"""),
    ("md", """`ta.topi` is an operator library written in the same language: a dense layer is
`Y[i, j] = sum_k X[i, k] * W[j, k] + B[j]`."""),
    ("code", """X = ta.placeholder((32, 64), name="X")
W = ta.placeholder((48, 64), name="W")
Bias = ta.placeholder((48,), name="B")
Y = ta.topi.nn.dense(X, W, Bias)
x, w, b = data(X), data(W), data(Bias)
dense = ta.build([Y], [X, W, Bias])
check(dense(x, w, b), x @ w.T + b)"""),
    ("md", """## 3. Reverse mode

`ta.JacobianRecursive(Y, [W, B], H)` (also called `ta.gradient`) back-propagates a *head* `H`
-- the gradient of some scalar loss with respect to `Y` -- to `W` and `B`.  The results are
ordinary tensors: print them, build them, differentiate them again."""),
    ("code", """H = ta.placeholder(Y.shape, name="H")
dW, dB = ta.JacobianRecursive(Y, [W, Bias], H)
print(ta.PrintTensorRecursively(dW))"""),
    ("md", """That is exactly the formula one would write by hand, `dW[j, k] = sum_i H[i, j] * X[i, k]`:
one reduction over the batch.  Run it and compare with NumPy:"""),
    ("code", """h = data(H)
backward = ta.build([dW, dB], [X, W, Bias, H])
dw, db = backward(x, w, b, h)
check(dw, h.T @ x)
check(db, h.sum(axis=0))"""),
    ("md", """### What the optimizer removed: `.work`

Differentiating element by element gives the full Jacobian `dY[i, j] / dW[p, q]`, a 4-d tensor
that is zero except where `j == p`.  Contracting the head with it, `sum_ij H[i, j] J[i, j, p, q]`,
is a correct gradient that sums over all those zeros.
`ta.lower(...)` shows the loops that `build` compiles, and `.work` counts exactly how many times
their innermost bodies run."""),
    ("code", """Y0 = ta.topi.nn.dense(X, W)                    # (Jacobian differentiates one tensor's body:
J = ta.Jacobian(Y0, W, optimize=False)         #  the product without the bias)
print("raw Jacobian:", J.shape)
dW_naive = ta.generalized_matmul(H, J, 2)     # sum_ij H[i, j] * J[i, j, p, q]
work_raw = ta.lower([dW_naive], [X, W, H]).work
work_opt = ta.lower([dW], [X, W, H]).work
print(f"work through the raw Jacobian: {work_raw:,}")
print(f"work of the optimized dW:      {work_opt:,} (= 32 * 48 * 64 = {32 * 48 * 64:,})")
check(ta.build([dW_naive], [X, W, H])(x, w, h), h.T @ x)"""),
    ("code", """print(ta.lower([dW, dB], [X, W, Bias, H]))"""),
    ("md", """## 4. Forward mode and second order

`ta.jvp(Y, [W], [V])` is the directional derivative `sum_pq dY/dW[p, q] * V[p, q]` -- for the
dense layer `X @ V.T`."""),
    ("code", """V = ta.placeholder(W.shape, name="V")
dY = ta.jvp(Y, [W], [V])
v = data(V)
check(ta.build([dY], [X, V])(x, v), x @ v.T)"""),
    ("md", """`ta.hessian_vector_product(L, [Z], [U])` multiplies the Hessian of a scalar `L` by a vector
without ever forming the Hessian (forward mode over reverse mode).  For the quadratic form
`L = sum_ij Z[i] Q[i, j] Z[j]` the Hessian is `Q + Q.T`."""),
    ("code", """Z = ta.placeholder((6,), "float64", name="Z")
Q = ta.placeholder((6, 6), "float64", name="Q")
U = ta.placeholder((6,), "float64", name="U")
i6, j6 = ta.reduce_axis((0, 6), name="i"), ta.reduce_axis((0, 6), name="j")
L = ta.compute((), lambda: ta.sum(Z[i6] * Q[i6, j6] * Z[j6], axis=[i6, j6]), name="L")
(HU,) = ta.hessian_vector_product(L, [Z], [U])
z, q, u = data(Z), data(Q), data(U)
check(ta.build([HU], [Z, Q, U])(z, q, u), (q + q.T) @ u, rtol=1e-12)"""),
    ("md", """## 5. A hand-written derivative: `override`

`override={T: fn}` replaces the derivative of tensor `T`; `fn(T, input, head)` returns the
gradient with respect to `input`.  The *straight-through estimator* is a classic: round in the
forward pass, but pretend the rounding was the identity in the backward pass."""),
    ("code", """S = ta.placeholder((8,), name="S")
rounded = ta.compute((8,), lambda i: ta.cast("float32", ta.cast("int32", S[i] * 4.0)) / 4.0, name="round")
out = ta.compute((8,), lambda i: rounded[i] * rounded[i], name="out")
straight_through = {rounded: lambda T, inp, head: ta.compute(head.shape, lambda i: head[i] * 1.0, name="st")}
(dS,) = ta.JacobianRecursive(ta.topi.sum(out), [S], override=straight_through)
s = data(S)
r = np.trunc(s * 4) / 4
check(ta.build([dS], [S])(s), 2 * r)   # d(r^2)/dr, passed straight through the rounding"""),
    ("md", """## 6. Checking gradients: `gradcheck`

`ta.gradcheck` compares reverse mode and forward mode with central finite differences in
float64 on random data; it returns `True` or raises with the worst mismatch."""),
    ("code", """G = ta.placeholder((4, 5), "float64", name="G")
T = ta.compute((4, 5), lambda i, j: ta.tanh(G[i, j]) * G[i, (j + 1) % 5], name="T")
print(ta.gradcheck(T, [G]))"""),
    ("md", """## 7. A custom reducer: argmax

`ta.comm_reducer(combine, identity)` defines a reduction over tuples.  Argmax carries
`(index, value)`; a reduce axis can be used as a value.  The gradient of the maximum value
goes to the element the reducer chose."""),
    ("code", """def combine(a, b):
    keep = a[1] >= b[1]
    return ta.select(keep, a[0], b[0]), ta.select(keep, a[1], b[1])

argmax = ta.comm_reducer(combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)), name="argmax")
R = ta.placeholder((4, 9), name="R")
c = ta.reduce_axis((0, 9), name="c")
index, value = ta.compute((4,), lambda i: argmax((c, R[i, c]), axis=c), name="am")
(dR,) = ta.JacobianRecursive(ta.topi.sum(value), [R])
r = data(R)
idx, val, grad = ta.build([index, value, dR], [R])(r)
check(idx, np.argmax(r, axis=1))
check(val, r.max(axis=1))
check(grad, np.eye(9)[np.argmax(r, axis=1)])"""),
    ("md", """## 8. A small training loop

A two-layer network `tanh(X W1^T) w2` learns a smooth function by gradient descent.  One kernel
computes the loss and both gradients; NumPy applies the update.  The first gradient is checked
against back-propagation written out in NumPy."""),
    ("code", """n, d, hidden = 64, 3, 16
Xt = ta.placeholder((n, d), "float64", name="X")
Tt = ta.placeholder((n,), "float64", name="T")
W1 = ta.placeholder((hidden, d), "float64", name="W1")
w2 = ta.placeholder((hidden,), "float64", name="w2")
act = ta.topi.nn.dense(Xt, W1)
act = ta.compute(act.shape, lambda i, j: ta.tanh(act[i, j]), name="tanh")
q = ta.reduce_axis((0, hidden), name="q")
pred = ta.compute((n,), lambda i: ta.sum(act[i, q] * w2[q], axis=q), name="pred")
r2 = ta.reduce_axis((0, n), name="r")
loss = ta.compute((), lambda: ta.sum((pred[r2] - Tt[r2]) ** 2, axis=r2) / float(n), name="loss")
gW1, gw2 = ta.JacobianRecursive(loss, [W1, w2])
step = ta.build([loss, gW1, gw2], [Xt, Tt, W1, w2])

xs = rng.uniform(-1, 1, (n, d))
ts = np.sin(2 * xs[:, 0]) + xs[:, 1] * xs[:, 2]
p1, p2 = rng.standard_normal((hidden, d)) * 0.5, rng.standard_normal(hidden) * 0.5

# the first step against hand-written back-propagation
hid = np.tanh(xs @ p1.T); err = hid @ p2 - ts
dpred = 2 * err / n
l0, g1, g2 = step(xs, ts, p1, p2)
check(l0, np.mean(err ** 2), rtol=1e-12)
check(g2, hid.T @ dpred, rtol=1e-10)
check(g1, ((dpred[:, None] * p2) * (1 - hid ** 2)).T @ xs, rtol=1e-10)

losses = []
for it in range(300):
    l, g1, g2 = step(xs, ts, p1, p2)
    losses.append(float(l))
    p1 -= 0.2 * g1
    p2 -= 0.2 * g2
print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f}")
assert losses[-1] < 0.5 * losses[0]"""),
    ("code", """plt.figure(figsize=(5, 3))
plt.plot(losses)
plt.yscale("log"); plt.xlabel("step"); plt.ylabel("mean squared error"); plt.title("training loss")
plt.show()"""),
    ("md", """## 9. Forward and backward time of a few layers

Each layer's forward and its backward (the gradients with respect to all its float inputs) are
compiled and timed; every kernel is first checked against NumPy's forward or `ta.evaluate`."""),
    ("code", """def median_ms(kernel, args, repeat=9):
    kernel(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); kernel(*args); times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))

def layer(name, out, inputs, want):
    head = ta.placeholder(out.shape, out.dtype, name="head")
    grads = ta.JacobianRecursive(out, inputs, head)
    args = [data(t) for t in inputs]
    # one thread: on a shared machine, a second thread mostly measures the scheduler
    fwd = ta.build([out], inputs, num_threads=1)
    bwd = ta.build(list(grads), inputs + [head], num_threads=1)
    check(fwd(*args), want(*args), rtol=1e-3, atol=1e-3)
    hv = data(head)
    small = {t: a for t, a in zip(inputs + [head], args + [hv])}
    got = bwd(*args, hv)
    got = got if isinstance(got, tuple) else (got,)   # one output: one array; several: a tuple
    for got, ref in zip(got, ta.evaluate(list(grads), small)):
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-3)
    return name, median_ms(fwd, args), median_ms(bwd, args + [hv])

Xc = ta.placeholder((4, 3, 16, 16), name="X")
Wc = ta.placeholder((8, 3, 3, 3), name="W")
Xs = ta.placeholder((16, 100), name="X")
Xm = ta.placeholder((2, 4, 16, 16), name="X")

def conv_ref(x, w):
    out = np.zeros((4, 8, 14, 14), np.float32)
    for r in range(3):
        for s in range(3):
            out += np.einsum("nchw,oc->nohw", x[:, :, r:r + 14, s:s + 14], w[:, :, r, s])
    return out

def softmax_ref(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)

timings = [
    layer("dense", ta.topi.nn.dense(X, W, Bias), [X, W, Bias], lambda x, w, b: x @ w.T + b),
    layer("conv2d", ta.topi.nn.conv2d(Xc, Wc, 1, 0), [Xc, Wc], conv_ref),
    layer("softmax", ta.topi.nn.softmax(Xs), [Xs], softmax_ref),
    layer("max pool", ta.topi.nn.pool(Xm, (2, 2), (2, 2), (0, 0, 0, 0), "max"), [Xm],
          lambda x: x.reshape(2, 4, 8, 2, 8, 2).max(axis=(3, 5))),
]
for name, f, b in timings:
    print(f"{name:<9} forward {f:7.3f} ms   backward {b:7.3f} ms")"""),
    ("code", """names = [t[0] for t in timings]
pos = np.arange(len(names))
plt.figure(figsize=(6, 3))
plt.bar(pos - 0.2, [t[1] for t in timings], 0.4, label="forward")
plt.bar(pos + 0.2, [t[2] for t in timings], 0.4, label="backward")
plt.xticks(pos, names); plt.ylabel("ms (median)"); plt.legend(); plt.title("forward and backward time")
plt.show()"""),
    ("md", """## 10. Looking inside

In Jupyter a lowered program displays as its loops, with each nest's work, and a tensor as its
recursive printout.  `TENSORAD_LOG=passes` (or `with ta.config(log="passes"):`) logs the time
of every compiler stage, and `kernel.export("name.so")` writes a shared library with a C header
(see the README)."""),
    ("code", "ta.lower([dW, dB], [X, W, Bias, H])"),
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
