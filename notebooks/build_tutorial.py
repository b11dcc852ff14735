"""Writes notebooks/autodiff_tutorial.ipynb from the cells below (run: python notebooks/build_tutorial.py).

The notebook is kept as source here so that it reviews as text; the test suite executes the
generated .ipynb from top to bottom through a real Jupyter kernel.
"""

import pathlib

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
    ("md", """# Tensor-level automatic differentiation with tensorad

This tutorial retells the 2018 TVM notebook on tensor-expression autodiff with tensorad: define a
computation at the index level, differentiate it, look at the raw and the optimized Jacobians,
the lowered loops, and time forward against backward.  Then it revisits every case the 2018
notebook called slow or unsupported -- pooling, softmax, flatten, max pooling."""),
    ("code", """import time
import numpy as np
import tensorad as ta

def measure(outputs, inputs, repeat=7):
    \"\"\"Median milliseconds of one call of the compiled kernel (after a warm-up call).\"\"\"
    kernel = ta.build(outputs, inputs)
    rng = np.random.default_rng(0)
    args = [rng.random(t.shape, dtype=np.float64).astype(t.dtype) for t in inputs]
    kernel(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter(); kernel(*args); times.append(time.perf_counter() - t0)
    return 1000 * float(np.median(times))"""),
    ("md", """## A dense layer and its gradient

`JacobianRecursive(Y, [W, B], H)` takes the head `H` (the gradient of some scalar loss with
respect to `Y`) and returns the gradients with respect to `W` and `B`."""),
    ("code", """X = ta.placeholder((32, 1000), name="X")
W = ta.placeholder((1000, 1000), name="W")
B = ta.placeholder((1000,), name="B")
Y = ta.topi.nn.dense(X, W, B)
H = ta.placeholder(Y.shape, name="H")
dW, dB = ta.JacobianRecursive(Y, [W, B], H)
print("forward  ms", round(measure([Y], [X, W, B]), 3))
print("backward ms", round(measure([dW, dB], [X, W, B, H]), 3))"""),
    ("md", """## How it works: the raw Jacobian

`Jacobian(Y, W, optimize=False)` differentiates each element: `W[j, k]` becomes a delta that is
1 where the Jacobian's indices equal `(j, k)`.  Summing over mostly zeros is what the optimizer
removes."""),
    ("code", """Y0 = ta.topi.nn.dense(X, W)
print(ta.PrintTensorRecursively(Y0))
J = ta.Jacobian(Y0, W, optimize=False)
print(ta.PrintTensorRecursively(J))"""),
    ("code", """J_opt = ta.OptimizeAndLiftNonzeronessConditions(J)
print(ta.PrintTensorRecursively(J_opt))"""),
    ("md", """## Generalized matmul with the head, inlining, and the optimizer again

The gradient is `generalized_matmul(H, Jacobian(Y, W), 2)`; inlining the Jacobian and optimizing
once more eliminates the remaining reduction over zeros: one reduction over the batch is left,
exactly the hand-written formula `dW[j, k] = sum_i H[i, j] * X[i, k]`."""),
    ("code", """dLdW = ta.generalized_matmul(H, J_opt, 2)
dLdW = ta.InlineNonReductions(dLdW, [J_opt])
dLdW = ta.OptimizeAndLiftNonzeronessConditions(dLdW)
print(ta.PrintTensorRecursively(dLdW))"""),
    ("md", "The gradient `JacobianRecursive` returned reads the same way:"),
    ("code", """print(ta.PrintTensorRecursively(dW))"""),
    ("md", """## The lowered loops

`ta.lower` shows the loop nests that `ta.build` compiles; `.work` counts the executions of the
innermost loop bodies exactly (here 32 x 1000 x 1000 for `dW`, plus `dB`)."""),
    ("code", """prog = ta.lower([dW, dB], [X, W, B, H])
print(prog)
print("work:", prog.work)"""),
    ("md", "## Convolution"),
    ("code", """Xc = ta.placeholder((32, 17, 28, 28), name="X")
Wc = ta.placeholder((19, 17, 3, 3), name="W")
Yc = ta.topi.nn.conv2d(Xc, Wc, 1, 0)
Hc = ta.placeholder(Yc.shape, name="H")
gc = ta.JacobianRecursive(Yc, [Xc, Wc], Hc)
print("forward  ms", round(measure([Yc], [Xc, Wc]), 3))
print("backward ms", round(measure(list(gc), [Xc, Wc, Hc]), 3))"""),
    ("md", """# The cases 2018 called slow or unsupported

## Average pooling
In 2018 the backward ran 16x slower than the forward.  Now the reduction iterates over the window
footprint only."""),
    ("code", """Xp = ta.placeholder((32, 17, 280, 280), name="X")
Yp = ta.topi.nn.pool(Xp, (2, 2), (2, 2), (0, 0, 0, 0), "avg")
Hp = ta.placeholder(Yp.shape, name="H")
[gp] = ta.JacobianRecursive(Yp, [Xp], Hp)
print(ta.PrintTensorRecursively(gp))
print("forward  ms", round(measure([Yp], [Xp]), 3))
print("backward ms", round(measure([gp], [Xp, Hp]), 3))"""),
    ("md", "## Softmax written by hand"),
    ("code", """Xs = ta.placeholder((60, 1000), name="X")
Ws = ta.placeholder((1000, 1000), name="W")
exps = ta.topi.exp(ta.topi.nn.dense(Xs, Ws))
Ys = exps / ta.topi.sum(exps, axis=-1, keepdims=True)
Hs = ta.placeholder(Ys.shape, name="H")
gs = ta.JacobianRecursive(Ys, [Xs, Ws], Hs)
print("forward  ms", round(measure([Ys], [Xs, Ws]), 3))
print("backward ms", round(measure(list(gs), [Xs, Ws, Hs]), 3))"""),
    ("md", """## Flatten
Division and modulo defeated the 2018 solver (1568 ms for a copy).  isl solves the index
equations exactly: the gradient is a plain gather."""),
    ("code", """Xf = ta.placeholder((32, 10, 20, 25), name="X")
Yf = ta.topi.nn.flatten(Xf)
Hf = ta.placeholder(Yf.shape, name="H")
[gf] = ta.JacobianRecursive(Yf, [Xf], Hf)
print(ta.PrintTensorRecursively(gf))
print("work:", ta.lower([gf], [Xf, Hf]).work, "= number of elements of X:", 32 * 10 * 20 * 25)
print("backward ms", round(measure([gf], [Xf, Hf]), 3))"""),
    ("md", """## Max pooling
The 2018 gradient needed a Jacobian-sized temporary of more than 2^31 elements.  tensorad
computes the winner of each window once and routes the head to it."""),
    ("code", """Xm = ta.placeholder((1, 2, 100, 100), name="X")
Ym = ta.topi.nn.pool(Xm, (2, 2), (2, 2), (0, 0, 0, 0), "max")
Hm = ta.placeholder(Ym.shape, name="H")
[gm] = ta.JacobianRecursive(Ym, [Xm], Hm)
print(ta.PrintTensorRecursively(gm))
print("forward  ms", round(measure([Ym], [Xm]), 3))
print("backward ms", round(measure([gm], [Xm, Hm]), 3))"""),
    ("md", "## Softmax from the operator library"),
    ("code", """Xt = ta.placeholder((60, 200), name="X")
Yt = ta.topi.nn.softmax(Xt)
Ht = ta.placeholder(Yt.shape, name="H")
[gt] = ta.JacobianRecursive(Yt, [Xt], Ht)
print("forward  ms", round(measure([Yt], [Xt]), 3))
print("backward ms", round(measure([gt], [Xt, Ht]), 3))"""),
    ("md", """## Checking a gradient

`ta.gradcheck` compares reverse mode and forward mode with central finite differences in
float64."""),
    ("code", """A = ta.placeholder((4, 5), dtype="float64", name="A")
S = ta.compute((4, 5), lambda i, j: ta.tanh(A[i, j]) * A[i, (j + 1) % 5], name="S")
print(ta.gradcheck(S, [A]))"""),
    ("md", "In Jupyter a lowered program displays as its loops, with each nest's work:"),
    ("code", "ta.lower([gm], [Xm, Hm])"),
    ("md", "and a tensor as its recursive printout:"),
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
