"""Printing: PrintTensorRecursively in the seed's format (golden text), str(), the notebook forms."""

from __future__ import annotations

import tensorad as ta

DENSE_GOLDEN = """\
tensor compute[0] : float32 [32, 3000]
axes (i : [0, 31], j : [0, 2999])
Reduction
    identity [0.000000f]
    lhs [x]  rhs [y]
    combiner [(x + y)]
    axes (k : [0, 9999])
    condition True
    source[0] = (X(i, k) * W(j, k))

tensor X[0] : float32 [32, 10000]
    placeholder(X)

tensor W[0] : float32 [3000, 10000]
    placeholder(W)
"""


def _dense():
    X = ta.placeholder((32, 10000), name="X")
    W = ta.placeholder((3000, 10000), name="W")
    k = ta.reduce_axis((0, 10000), name="k")
    return ta.compute((32, 3000), lambda i, j: ta.sum(X[i, k] * W[j, k], axis=k), name="compute")


def test_seed_dense_example_golden():
    assert ta.PrintTensorRecursively(_dense()) == DENSE_GOLDEN


def test_str_is_the_one_tensor_block():
    assert str(_dense()) == DENSE_GOLDEN.split("\n\n")[0]
    assert repr(_dense()) == "Tensor(compute, shape=(32, 3000), dtype=float32)"


def test_elementwise_padding_with_lifted_reduction_golden():
    A = ta.placeholder((4,), name="A")
    k = ta.reduce_axis((0, 4), "k")
    M = ta.compute((6,), lambda i: ta.if_then_else((i >= 1) & (i < 5), A[i - 1], 0.0)
                   + ta.sum(A[k], axis=k, where=k < 2) * ta.cast("float32", i // 2 % 3), name="M")
    assert ta.PrintTensorRecursively(M) == """\
tensor M[0] : float32 [6]
axes (i : [0, 5])
    (if_then_else(((i >= 1) && (i < 5)), A((i - 1)), 0.000000f) + (M.red(i) * float32(((i // 2) % 3))))

tensor A[0] : float32 [4]
    placeholder(A)

tensor M.red[0] : float32 [6]
axes (i : [0, 5])
Reduction
    identity [0.000000f]
    lhs [x]  rhs [y]
    combiner [(x + y)]
    axes (k : [0, 3])
    condition (k < 2)
    source[0] = A(k)
"""


def test_multi_value_reduction_golden():
    A = ta.placeholder((3, 4), "float64", name="A")
    k = ta.reduce_axis((0, 4), "k")
    argmax = ta.comm_reducer(
        lambda x, y: (ta.select(x[1] >= y[1], x[0], y[0]), ta.select(x[1] >= y[1], x[1], y[1])),
        lambda t0, t1: (ta.const(-1, t0), ta.const(-1e30, t1)), name="argmax")
    idx, val = ta.compute((3,), lambda i: argmax((k, A[i, k]), axis=k), name="am")
    R = ta.compute((3,), lambda i: val[i] + ta.cast("float64", idx[i]), name="R")
    assert ta.PrintTensorRecursively(R) == """\
tensor R[0] : float64 [3]
axes (i : [0, 2])
    (am.v1(i) + float64(am.v0(i)))

tensor am[1] : float64 [3]
axes (i : [0, 2])
Reduction
    identity [-1, -1000000000000000019884624838656.000000]
    lhs [x0, x1]  rhs [y0, y1]
    combiner [select((x1 >= y1), x0, y0), select((x1 >= y1), x1, y1)]
    axes (k : [0, 3])
    condition True
    source[0] = k
    source[1] = A(i, k)
    value_index 1

tensor A[0] : float64 [3, 4]
    placeholder(A)

tensor am[0] : int32 [3]
axes (i : [0, 2])
Reduction
    identity [-1, -1000000000000000019884624838656.000000]
    lhs [x0, x1]  rhs [y0, y1]
    combiner [select((x1 >= y1), x0, y0), select((x1 >= y1), x1, y1)]
    axes (k : [0, 3])
    condition True
    source[0] = k
    source[1] = A(i, k)
    value_index 0
"""


def test_same_names_are_told_apart_deterministically():
    A1 = ta.placeholder((2,), name="A")
    A2 = ta.placeholder((2,), name="A")
    S = ta.compute((2,), lambda i: A1[i] - A2[i], name="S")
    text = ta.PrintTensorRecursively(S)
    assert "(A(i) - A#2(i))" in text
    assert text.count("placeholder(A)") == 2
    assert "tensor A#2[0]" in text


def test_repr_html_and_pretty():
    html = _dense()._repr_html_()
    assert html.startswith("<pre") and html.endswith("</pre>")
    assert "<b>tensor compute[0] : float32 [32, 3000]</b>" in html
    assert "(X(i, k) * W(j, k))" in html
    lt = ta.compute((2,), lambda i: ta.select(ta.placeholder((2,), name="P")[i] < 0.0, 1.0, 2.0),
                    name="lt")._repr_html_()
    assert "&lt;" in lt and " < " not in lt  # escaped

    class _Printer:
        def __init__(self):
            self.out = []

        def text(self, s):
            self.out.append(s)

    p = _Printer()
    _dense()._repr_pretty_(p, False)
    assert "".join(p.out) == str(_dense())


def test_expression_str_uses_operator_syntax():
    A = ta.placeholder((3,), name="A")
    i = ta.ir.var("i", 0, 3)
    e = ta.maximum(ta.exp(-A[i]), ta.power(A[i], 2.0)) / ta.sqrt(A[(i + 1) % 3])
    assert str(e) == "(max(exp((-A(i))), pow(A(i), 2.000000f)) / sqrt(A(((i + 1) % 3))))"


def test_a_shared_dag_prints_once_per_value_not_as_a_tree():
    # y = y * y + 1, 200 times: a tree print has 2^200 leaves; each value once here
    X = ta.placeholder((4,), name="X")

    def body(i):
        e = X[i]
        for _ in range(200):
            e = e * e + 1.0
        return e

    text = str(ta.compute((4,), body, name="Z"))
    assert len(text) < 200 * 40 and text.count("@") == 3 * 200  # 200 names, 400 uses
    assert "let @1 = X(i); @2 = ((@1 * @1) + 1.000000f);" in text



def test_small_constants_print_their_value():
    """Six decimals where they give the constant back, else the shortest exact text: an epsilon
    of 1e-9 printed as ``0.000000f`` read as a zero."""
    X = ta.placeholder((3,), "float32", name="X")
    Y = ta.compute((3,), lambda i: X[i] * 1e-9 + 0.5, name="Y")
    Z = ta.compute((3,), lambda i: ta.cast("float64", X[i]) * ta.const(-2.5e-12, "float64"), name="Z")
    assert str(Y.op.body[0]) == "((X(i) * 1e-09f) + 0.500000f)"
    assert str(Z.op.body[0]) == "(float64(X(i)) * -2.5e-12)"
