"""Hypothesis strategies for random, well-formed tensor programs (shared by every test folder).

``random_program()`` draws a small DAG: one to ``max_inputs`` placeholders, then one to
``max_computes`` computes, each reading the tensors made before it.  Bodies mix

* elementwise arithmetic and scalar math in forms that stay finite on data in [-2, 2]
  (``exp(min(x, 3))``, ``log(|x| + 1)``, ``a / (|b| + 1)``, ...),
* powers with constant and variable exponents (data, index values, 0), also of a ``select``
  whose other branch is an exact zero (``0 ** 0 = 1``, ``0 ** -1 = inf``),
* ``select`` on data comparisons and ``if_then_else`` on index conditions,
* index variables used as values, with ``//`` and ``%`` on possibly negative numerators,
* reads that are direct, transposed (another axis), reversed (``s - 1 - v % s``), shifted
  modulo the size (``(v + c) % s``), strided (``(v + c) // 2 % s`` with c possibly negative),
  flattened (``(2 v + w) % s``), constant, or shifted beyond the edge under an
  ``if_then_else`` padding guard,
* reductions (sum, max, min, prod, a custom product, argmax as a two-output op) with optional
  ``where`` conditions on the indices, as whole bodies or nested in a larger body (so the
  language lifts them).

Every read is in bounds by construction (the language's bounds checker runs on each compute,
so a generator bug fails loudly).  Use in a test::

    from strategies import random_program, random_feed

    @given(random_program())
    def test_x(program): outputs, placeholders = program

``Program.output`` is the last floating-point tensor (the one to differentiate).

A deep random search takes ``max_examples=examples(n)``: ``n`` examples in ``make test``, a quarter of
them in the fast tier (``make test-fast`` sets ``TENSORAD_TEST_TIER=fast``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import numpy as np
from hypothesis import strategies as st

import tensorad as ta
from tensorad.ir.dtype import numpy_dtype


def examples(deep: int) -> int:
    """Hypothesis examples for a deep random search: ``deep``, or a quarter of it (at least 10) in the
    fast tier."""
    return max(10, deep // 4) if os.environ.get("TENSORAD_TEST_TIER") == "fast" else deep


class Program(NamedTuple):
    """A random program: computed tensors (in creation order) and its placeholders."""

    outputs: list
    placeholders: list

    @property
    def output(self):
        """The last floating-point computed tensor."""
        return [t for t in self.outputs if t.dtype in ta.FLOAT_DTYPES][-1]


def random_feed(placeholders, rng: np.random.Generator, lo: float = -2.0, hi: float = 2.0) -> dict:
    """Uniform random arrays for ``placeholders`` (float in [lo, hi), ints in [-3, 3])."""
    feed = {}
    for p in placeholders:
        if p.dtype in ta.FLOAT_DTYPES:
            feed[p] = rng.uniform(lo, hi, size=p.shape).astype(numpy_dtype(p.dtype))
        else:
            feed[p] = rng.integers(-3, 4, size=p.shape).astype(p.dtype)
    return feed


def argmax_reducer():
    """(index, value) argmax; ties keep the left operand (the first maximum in fold order)."""
    def combine(x, y):
        keep = x[1] >= y[1]
        return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])

    return ta.comm_reducer(combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)),
                           name="argmax")


def product_reducer():
    """A user-written product: the built-in prod through the custom-combiner path."""
    return ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")


_ARGMAX = argmax_reducer()
_MYPROD = product_reducer()

_shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


class _BodyBuilder:
    """Draws expressions over index variables ``ivars`` reading the tensors in ``pool``."""

    def __init__(self, draw, pool, ivars, dtype, depth):
        self.draw, self.pool, self.ivars, self.dtype, self.depth = draw, pool, list(ivars), dtype, depth

    def _int(self, lo, hi):
        return self.draw(st.integers(lo, hi))

    # ---- indices -----------------------------------------------------------------------
    def index(self, size):
        """An index into a dimension of ``size`` and a list of guard conditions it needs."""
        kinds = ["const"]
        if self.ivars:
            kinds += ["direct", "mod", "rev", "div", "guard"] + (["flat"] if len(self.ivars) > 1 else [])
        kind = self.draw(st.sampled_from(kinds))
        if kind == "const":
            return self._int(0, size - 1), []
        v = self.draw(st.sampled_from(self.ivars))
        if kind == "direct":
            if v.lo >= 0 and v.hi <= size:
                return v, []
            kind = "mod"
        if kind == "mod":
            return (v + self._int(-2, 2)) % size, []
        if kind == "rev":
            return (size - 1) - v % size, []
        if kind == "div":
            return (v + self._int(-2, 1)) // 2 % size, []
        if kind == "flat":
            w = self.draw(st.sampled_from([u for u in self.ivars if u is not v]))
            return (v * 2 + w) % size, []
        shifted = v + self._int(-1, 1)
        return shifted, [shifted >= 0, shifted < size]

    def read(self):
        t = self.draw(st.sampled_from(self.pool))
        idx, guards = [], []
        for s in t.shape:
            i, g = self.index(s)
            idx.append(i)
            guards += g
        value = t[tuple(idx)] if idx else t[()]
        if t.dtype != self.dtype:
            value = ta.cast(self.dtype, value)
        if guards:
            cond = guards[0]
            for g in guards[1:]:
                cond = cond & g
            pad = self.draw(st.sampled_from([0.0, -1.0]))
            value = ta.if_then_else(cond, value, pad)
        return value

    def index_value(self):
        """An index variable used as a value, through floor division / modulo."""
        v = self.draw(st.sampled_from(self.ivars))
        c = self._int(-2, 1)
        form = self.draw(st.sampled_from(["plain", "div", "mod"]))
        e = v + c if form == "plain" else (v + c) // 2 if form == "div" else (v + c) % 2
        return ta.cast(self.dtype, e)

    def index_cond(self):
        v = self.draw(st.sampled_from(self.ivars))
        c = self._int(0, 2)
        return self.draw(st.sampled_from([v < c, v >= c, v % 2 == 0, v != c]))

    # ---- values ------------------------------------------------------------------------
    def expr(self, depth=None):
        depth = self.depth if depth is None else depth
        leaves = ["read", "read", "const"] + (["ivalue"] if self.ivars else [])
        nodes = ["unary", "binary", "binary", "select"] + (["ite"] if self.ivars else [])
        kind = self.draw(st.sampled_from(leaves + (nodes if depth > 0 else [])))
        if kind == "read":
            return self.read()
        if kind == "const":
            return ta.const(self.draw(st.sampled_from([0.5, -1.5, 2.0])), self.dtype)
        if kind == "ivalue":
            return self.index_value()
        if kind == "unary":
            return self.unary(self.expr(depth - 1))
        if kind == "binary":
            return self.binary(self.expr(depth - 1), self.expr(depth - 1))
        if kind == "select":
            a, b = self.expr(depth - 1), self.expr(depth - 1)
            return ta.select(a < b, a, self.expr(depth - 1))
        return ta.if_then_else(self.index_cond(), self.expr(depth - 1), self.expr(depth - 1))

    def unary(self, x):
        fn = self.draw(st.sampled_from(["neg", "abs", "tanh", "sigmoid", "sin", "cos", "exp",
                                        "log", "sqrt"]))
        return {
            "neg": lambda: -x, "abs": lambda: ta.abs(x), "tanh": lambda: ta.tanh(x),
            "sigmoid": lambda: ta.sigmoid(x), "sin": lambda: ta.sin(x), "cos": lambda: ta.cos(x),
            "exp": lambda: ta.exp(ta.minimum(x, 3.0)), "log": lambda: ta.log(ta.abs(x) + 1.0),
            "sqrt": lambda: ta.sqrt(ta.abs(x) + 0.25),
        }[fn]()

    def exponent(self, b):
        """An exponent: a constant (0 among them), an index value (exact zeros at some
        points) or data (clamped to [-2, 2] so that powers stay finite on positive bases)."""
        kinds = ["const", "data"] + (["ivalue"] if self.ivars else [])
        kind = self.draw(st.sampled_from(kinds))
        if kind == "const":
            return ta.const(self.draw(st.sampled_from([0.0, 1.0, 2.0, -1.0, 0.5])), self.dtype)
        if kind == "ivalue":
            return self.index_value()
        return ta.minimum(ta.maximum(b, -2.0), 2.0)

    def binary(self, a, b):
        fn = self.draw(st.sampled_from(["add", "sub", "mul", "div", "max", "min", "pow", "powvar",
                                        "powsel"]))
        return {
            "add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
            "div": lambda: a / (ta.abs(b) + 1.0), "max": lambda: ta.maximum(a, b),
            "min": lambda: ta.minimum(a, b), "pow": lambda: ta.power(ta.abs(a) + 0.5, 2.0),
            # a variable exponent on a positive base
            "powvar": lambda: ta.power(ta.abs(a) + 0.5, self.exponent(b)),
            # a select inside pow: the base is exactly zero where the choice fails
            # (0 ** 0 = 1, 0 ** -1 = inf: nonzeroness may not look through it)
            "powsel": lambda: ta.power(ta.select(a < b, ta.abs(a), 0.0), self.exponent(b)),
        }[fn]()


def _reduction(draw, builder, axes, dtype, custom):
    """A reduction over a fresh axis (and maybe a second one); returns one or two bodies."""
    n_red = draw(st.integers(1, 2))
    red = []
    for r in range(n_red):
        lo = draw(st.integers(0, 1))
        red.append(ta.reduce_axis((lo, lo + draw(st.integers(1, 3))), name=f"r{r}"))
    inner = _BodyBuilder(draw, builder.pool, list(axes) + red, dtype, builder.depth - 1)
    src = inner.expr()
    where = None
    if draw(st.booleans()):
        where = _BodyBuilder(draw, builder.pool, list(axes) + red, dtype, 0).index_cond()
    names = ["sum", "max", "min", "prod"] + (["myprod", "argmax"] if custom else [])
    name = draw(st.sampled_from(names))
    axis = red if len(red) > 1 else red[0]
    if name == "argmax":
        flat = red[0] if len(red) == 1 else red[0] * 3 + red[1]
        return _ARGMAX((flat, src), axis=axis, where=where)
    reducer = _MYPROD if name == "myprod" else getattr(ta, name)
    return (reducer(src, axis=axis, where=where),)


@st.composite
def random_program(draw, dtype: str = "float32", max_inputs: int = 2, max_computes: int = 3,
                   depth: int = 2, reductions: bool = True, custom_reducers: bool = True) -> Program:
    """A random well-formed program (see the module docstring); returns a :class:`Program`."""
    inputs = [ta.placeholder(draw(_shapes), dtype, name=f"in{n}")
              for n in range(draw(st.integers(1, max_inputs)))]
    pool = list(inputs)
    outputs = []
    for c in range(draw(st.integers(1, max_computes))):
        shape = draw(_shapes)
        form = draw(st.sampled_from(["elementwise", "reduce", "nested"] if reductions else ["elementwise"]))

        def fcompute(*axes, form=form, pool=tuple(pool)):
            builder = _BodyBuilder(draw, list(pool), axes, dtype, depth)
            if form == "elementwise":
                return builder.expr()
            bodies = _reduction(draw, builder, axes, dtype, custom_reducers and form == "reduce")
            if form == "reduce":
                return bodies if len(bodies) > 1 else bodies[0]
            return bodies[0] * 0.5 + builder.expr(0)  # a nested reduction: the language lifts it

        made = ta.compute(shape, fcompute, name=f"t{c}")
        made = list(made) if isinstance(made, tuple) else [made]
        pool += made
        outputs += made
    if outputs[-1].dtype not in ta.FLOAT_DTYPES:  # argmax's index last: end on a float tensor
        last = outputs[-1]
        outputs.append(ta.compute(last.shape, lambda *ax: ta.cast(dtype, last[ax] if ax else last[()]),
                                  name=f"t{len(outputs)}"))
    return Program(outputs, inputs)
