"""Fits the erf/erfc polynomials of ``codegen/llvm/vector_math.py`` (run: ``python tools/fit_erf.py``).

Pieces, each a polynomial in a variable mapped to [-1, 1]:

* ``|x| < 1``:        ``erf(x) = x * P(s)``,              ``s = 2 x^2 - 1``;
* float32, ``1 <= |x| < H``: ``erfc(x) = exp(-x^2) * Q(s)``, ``s`` maps ``[1, H]`` (one piece of
  degree 10: no division and no second polynomial in the vector code);
* float64, ``1 <= |x| < 2.5``: ``erfc(x) = exp(-x^2) * Q1(s)``,    ``s = (x - 1.75) / 0.75``;
  ``2.5 <= |x| < H``: ``erfc(x) = exp(-x^2) * Q2(s) / x``, ``s`` maps ``[2.5, H]``;
* ``H`` 6 (float64) or 4 (float32): beyond it ``erf`` rounds to 1.

Least squares on Chebyshev nodes against Python's ``math.erf``/``math.erfc`` (about 1 ulp),
evaluated with ``mpmath``-free float64 arithmetic; prints the coefficients (highest degree
first, for Horner) and the worst relative error of ``erf`` on a dense grid.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.polynomial import chebyshev as C
from numpy.polynomial import polynomial as P

PIECES = {
    "float64": {"small": 12, "mid": 18, "tail": 18, "hi": 6.0},
    "float32": {"small": 5, "one": 10, "hi": 4.0},
}


def fit(f, lo, hi, deg, n=4000):
    k = np.arange(n)
    s = np.cos(np.pi * (k + 0.5) / n)
    x = lo + (s + 1) * (hi - lo) / 2
    y = np.array([f(v) for v in x])
    cheb = C.chebfit(s, y, deg)
    return P.polytrim(C.cheb2poly(cheb), 0)[::-1]  # highest degree first


def horner(coefs, s):
    acc = np.full_like(s, coefs[0])
    for c in coefs[1:]:
        acc = acc * s + c
    return acc


def pieces(dtype):
    """``{name: coefficients}`` of ``dtype``'s pieces and ``hi``."""
    spec = PIECES[dtype]
    hi = spec["hi"]
    out = {"small": fit(lambda s: (math.erf(math.sqrt((s + 1) / 2)) / math.sqrt((s + 1) / 2)) if s > -1
                        else 2 / math.sqrt(math.pi), -1, 1, spec["small"])}
    if "one" in spec:
        out["one"] = fit(lambda x: math.erfc(x) * math.exp(x * x), 1.0, hi, spec["one"])
    else:
        out["mid"] = fit(lambda x: math.erfc(x) * math.exp(x * x), 1.0, 2.5, spec["mid"])
        out["tail"] = fit(lambda x: math.erfc(x) * math.exp(x * x) * x, 2.5, hi, spec["tail"])
    return out, hi


def erf(x, ps, hi):
    a = np.abs(x)
    s_small = 2 * a * a - 1
    r_small = a * horner(ps["small"], s_small)
    if "one" in ps:
        r_big = 1 - np.exp(-a * a) * horner(ps["one"], (2 * a - 1 - hi) / (hi - 1))
        return np.copysign(np.where(a < 1, r_small, np.where(a < hi, r_big, 1.0)), x)
    mid, tail = ps["mid"], ps["tail"]
    s_mid = (a - 1.75) / 0.75
    r_mid = 1 - np.exp(-a * a) * horner(mid, s_mid)
    s_tail = (2 * a - (2.5 + hi)) / (hi - 2.5)
    r_tail = 1 - np.exp(-a * a) * horner(tail, s_tail) / a
    r = np.where(a < 1, r_small, np.where(a < 2.5, r_mid, np.where(a < hi, r_tail, 1.0)))
    return np.copysign(r, x)


if __name__ == "__main__":
    for dtype in PIECES:
        ps, hi = pieces(dtype)
        x = np.linspace(-7, 7, 200001)
        ref = np.array([math.erf(v) for v in x])
        got = erf(x, ps, hi)
        err = np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-300))
        print(dtype, "max rel err", err)
        for name, cs in ps.items():
            print(f"    {name}=({', '.join(repr(float(c)) for c in cs)}),")
