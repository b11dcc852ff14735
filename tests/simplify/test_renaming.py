"""A tensor's name never changes what the optimizer does (roles from provenance).

Each program is written twice, with plain names and with names that imitate the ones
tensorad gives its own tensors (``Z.reduced`` looks like a reduction lifted out of ``Z``,
``E.grad`` like an adjoint).  Optimized -- directly and through autodiff -- both must give
the same printed program once tensor names are replaced by their order of appearance, and
the same work.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tensorad as ta
from tensorad.ir import tensor_graph

F = "float64"


def _canonical(outputs) -> str:
    """``PrintTensorRecursively`` with every tensor name replaced by its position."""
    text = "\n".join(ta.PrintTensorRecursively(t) for t in outputs)
    names = list(dict.fromkeys(t.name for t in tensor_graph(outputs)))
    for k, name in sorted(enumerate(names), key=lambda kn: -len(kn[1])):
        text = re.sub(r"(?<![\w.#])" + re.escape(name) + r"(?=[\[(#)])", f"T{k}", text)
    return text


def _row_norm(names):
    """``Z[i, j] = exp(X[i, j]) * R[i] + ...`` with ``R[i] = sum_k X[i, k] ** 2``."""
    X = ta.placeholder((4, 6), F, name=names["X"])
    k = ta.reduce_axis((0, 6), "k")
    R = ta.compute((4,), lambda i: ta.sum(X[i, k] * X[i, k], axis=k), name=names["R"])
    T = ta.compute((4, 6), lambda i, j: ta.exp(X[i, j]), name=names["T"])  # not cheap: kept
    Z = ta.compute((4, 6), lambda i, j: T[i, j] * R[i] + ta.if_then_else(j < 2, R[i], 0.0),
                   name=names["Z"])
    return X, Z


def _gather(names):
    """``E`` a sum, ``G`` a shifted gather of it: autodiff fuses gathers of adjoint sums."""
    X = ta.placeholder((8, 5), F, name=names["X"])
    k = ta.reduce_axis((0, 5), "k")
    E = ta.compute((8,), lambda i: ta.sum(X[i, k] * 2.0, axis=k), name=names["E"])
    Z = ta.compute((6,), lambda i: ta.if_then_else(i >= 1, E[i + 1] * 3.0, 0.0), name=names["Z"])
    return X, Z


CASES = [
    (_row_norm, {"X": "X", "R": "R", "T": "T", "Z": "Z"},
     {"X": "X", "R": "Z.reduced_by_user", "T": "Z.red_exp", "Z": "Z"}),
    (_row_norm, {"X": "A", "R": "B", "T": "T", "Z": "C"},
     {"X": "X.grad", "R": "Z.grad.red", "T": "X.grad.red2", "Z": "Z.grad"}),
    (_gather, {"X": "X", "E": "E", "Z": "Z"}, {"X": "X", "E": "E.grad", "Z": "Z.t0"}),
    (_gather, {"X": "P", "E": "Q", "Z": "W"}, {"X": "X", "E": "W.grad.red", "Z": "W"}),
]


@pytest.mark.parametrize("make, plain, tricky", CASES)
def test_optimizing_a_renamed_program_changes_nothing_but_names(make, plain, tricky):
    results = []
    for names in (plain, tricky):
        X, Z = make(names)
        opt = ta.OptimizeAndLiftNonzeronessConditions(Z)
        H = ta.placeholder(Z.shape, F, name="H")
        (grad,) = ta.gradient(Z, [X], head=H)
        x = np.random.default_rng(0).standard_normal(X.shape)
        h = np.random.default_rng(1).standard_normal(Z.shape)
        values = ta.evaluate([opt, grad], {X: x, H: h})
        results.append((_canonical([opt]), _canonical([grad]), ta.lower([opt], [X]).work,
                        ta.lower([grad], [X, H]).work, values))
    (p_opt, p_grad, w_opt, w_grad, v1), (q_opt, q_grad, u_opt, u_grad, v2) = results
    assert p_opt == q_opt
    assert p_grad == q_grad
    assert (w_opt, w_grad) == (u_opt, u_grad)
    for a, b in zip(v1, v2):
        np.testing.assert_array_equal(a, b)
