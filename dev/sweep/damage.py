"""Damaged disk caches: build, damage every cache file one way, build again in a fresh process.
python dev/sweep/damage.py MODE  (MODE: build | check)"""

import numpy as np

import tensorad as ta
from tensorad import topi

X = ta.placeholder((3, 5, 6, 6), "float32", "X")
W = ta.placeholder((4, 5, 3, 3), "float32", "W")
Y = topi.nn.relu(topi.nn.conv2d(X, W, 1, 1))
H = ta.placeholder(Y.shape, "float32", "H")
dX, dW = ta.gradient(Y, [X, W], H)
rng = np.random.default_rng(0)
x, w, h = (rng.standard_normal(t.shape).astype(np.float32) for t in (X, W, H))
k = ta.build([Y, dX, dW], [X, W, H])
got = k(x, w, h)
ref = ta.evaluate([Y, dX, dW], {X: x, W: w, H: h})
ok = all(np.allclose(a, b, atol=1e-4) for a, b in zip(got, ref))
print("match" if ok else "WRONG")
f = ta.function(Y, [X, W])
out, res = f.forward(x, w)
g = f.backward(res, h)
print("match" if np.allclose(out, ref[0], atol=1e-4) and np.allclose(g[0], ref[1], atol=1e-4) else "WRONG")
