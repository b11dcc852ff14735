"""Random well-formed tensor programs, kept as small trees that render to Python source.

A program is a list of tensor definitions (placeholders, then computes that read the tensors
made before them).  Bodies are trees of :class:`Node` -- a format string and children -- so
that the same tree renders to the source a worker executes, to the reproducer script saved
for a failure, and shrinks (:func:`shrink_candidates`) by replacing a subtree with one of its
children or a constant.  The generator needs no tensorad: it writes source text.

What the programs contain: shapes with size-1 and odd axes and 0-d tensors; chains
of tensors; index expressions with ``+ - * // %`` (reversed, strided, flattened, modular,
shifted by negative offsets under an ``if_then_else`` guard); reductions with every built-in
reducer and custom combiners (argmax as a two-output op, argmin with the other tie rule, a
combiner of two float values ``(sum, max)``, a user-written product), with ``where``
conditions, reduction ranges that start below zero, reductions nested in larger bodies (the
language lifts them); ``select`` on data; index variables used as values through integer casts;
the math functions; gathers (``X.take(..., G[...], mode=...)`` with ``G`` an integer input:
clipped, wrapped, or checked under an ``if_then_else`` that keeps its index in range).

The forms added later draw from streams of their own (:func:`generate`), so that older seeds
keep their programs.  The stream ``more``: integer tensors computed from
index values, integer inputs and saturating float-to-int casts of data, with runtime ``//``
and ``%`` (a zero divisor gives 0) and integer reductions; ``where`` masks on data; a
selecting combiner (the value of largest magnitude); ``ta.topi`` layers (softmax,
reductions, layer norm, GELU, transpose, reshape, matmul) on earlier tensors; float16/bfloat16
storage; data with inf, NaN and signed zeros; and the ways a kernel is called (``out=``, strided views,
``__dlpack__`` objects: :data:`CALLING`).
The stream ``forms`` (:class:`Forms`): reductions over an empty box
(``reduce_axis((2, 2))``), computes with an empty axis (nothing reads them), ``//`` and ``%``
of float data (programs that are not ``safe``: steps), multi-output computes (a tuple body),
contractions of inputs of their own at sizes up to 24 (``sum(a[i, r] * b[r, j])``, transposed,
batched, triangular under a ``where``: the shapes the GEMM strategies match), comparisons
of data stored as integers (``int32((x > y) | (x != 0))``, a step), and a half program's computes
stored in half (``dtype=DT``: rounded at each store, as ``ta.evaluate`` rounds).
The stream ``forms21``: reductions in a reduction's source that
read its axes (the language lifts them with one axis per outer reduce axis), scans (``where=r
<= i + c``: a prefix of the box per output point), gathers whose index is an integer output of
the program (an integer compute, a comparison, an argmax's index: data-dependent), more
``ta.topi`` layers composed with raw computes (variance, with no degree of freedom left where
derivatives are not checked; log-softmax, SiLU, RMS norm, min and product, reductions over
every axis, broadcasting against a reduction, padding, ``dense``, ``take``), and values rounded
to half inside a body.
The stream ``forms22`` (forms ``python -m fuzz.coverage`` would otherwise count as never drawn): a
reduce axis given bare, ``**``, ``~``, selects on ``>=``/``!=``, ``//`` and ``%`` by negative
constants, casts down inside a body, int64 inputs, more library calls (:meth:`Generator.topi22_def`:
``ta.topi`` math, ``flatten``, ``concatenate``, ``dense`` with a bias, an affine ``layer_norm``,
``cross_entropy``, ``embedding``, attention, ``conv2d``, ``pool``, ``ta.generalized_matmul``),
a combiner of three values (:data:`TRIPLE`), the options ``tune``, ``variants``,
``microkernel=False`` and four threads, and the callings :data:`CALLING22`.
The stream ``forms27``: small integer powers (``x ** 3``, ``x ** -2``, up to the
fourth), which code generation multiplies under fast math.
The stream ``forms49`` (:meth:`Generator.window_def`): running reductions along one axis of an
earlier tensor whose window may reach past its own output (``where=r <= i + 2``, a suffix
``r >= i - 2``, or shifted back: ``r < i - 1``), spelled with ``where`` or as the source padded
with the reducer's identity under ``if_then_else``, with every built-in reducer and the custom
combiners; most often the program's output.

``safe`` programs keep every function smooth where data is (``log(|x| +
0.5)``, ``a / (|b| + 1)``) so that derivatives can be checked against finite differences;
the others use the raw functions (``sqrt(x)``, ``1 / x``, ``log(x)``) to meet their special
values (zeros, infinities) in forward checks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace

SIZES = (1, 1, 2, 3, 3, 4, 5, 7, 1, 2, 3, 5, 9, 16, 17)  # vector loops need 8+ elements
# how the forward kernel is called: plain arrays, ``out=`` arrays, strided (non-contiguous)
# views of the inputs, inputs wrapped in an object offering only ``__dlpack__``
CALLING = ("plain", "out", "strided", "dlpack")
# drawn from ``forms22``: through a shared library (``kernel.export`` and ``ta.load``), and with the
# kernel's thread count changed after the build (``kernel.num_threads``)
CALLING22 = ("export", "threads")
HALF = ("float16", "bfloat16")
CONSTS = ("0.0", "0.5", "-1.5", "2.0", "3.0")


@dataclass(frozen=True)
class Node:
    """``fmt.format(*children)``; ``ty`` is ``"v"`` for a value (replaceable when shrinking)."""

    fmt: str
    kids: tuple = ()
    ty: str = "x"

    def render(self) -> str:
        return self.fmt.format(*(k.render() for k in self.kids))

    def size(self) -> int:
        return 1 + sum(k.size() for k in self.kids)


def leaf(text: str, ty: str = "x") -> Node:
    return Node(text.replace("{", "{{").replace("}", "}}"), (), ty)


@dataclass(frozen=True)
class Def:
    """One tensor: a placeholder (``body is None``) or a compute over ``axes`` (and ``raxes``,
    each ``(name, lo, hi)``).  ``names`` has two entries for an argmax (index, value)."""

    names: tuple[str, ...]
    shape: tuple[int, ...]
    dtype: str = "DT"
    body: Node | None = None
    axes: tuple[str, ...] = ()
    raxes: tuple[tuple[str, int, int], ...] = ()
    stored: bool = False  # ``dtype=DT``: a half program's compute stored in half (rounded)

    @property
    def name(self) -> str:
        return self.names[-1]


@dataclass(frozen=True)
class Program:
    dtype: str
    defs: tuple[Def, ...]
    out: str  # the float tensor to differentiate
    safe: bool = True
    data: str = "unit"  # data profile (:mod:`.data`)
    options: dict = field(default_factory=dict, compare=False)
    prune: bool = False  # render only what ``out`` needs (shrunk programs)
    calling: str = "plain"  # how the forward kernel is called (:data:`CALLING`)
    steps: tuple[str, ...] = ()  # tensors that cast float data to an integer (step functions)
    torch: str = field(default="", compare=False)  # a layer's PyTorch reference (:mod:`.layers`)

    @property
    def placeholders(self) -> list[Def]:
        return [d for d in self.defs if d.body is None]

    def render(self, dtype: str | None = None, size: tuple[int, int | None] | None = None,
               least: int | None = None) -> str:
        """Python source defining ``INPUTS``, ``TENSORS`` (every computed tensor) and ``OUT``.
        ``size = (e, m)``: every shape entry and reduction bound equal to ``e`` written as ``m``, or,
        for ``m`` ``None``, as the size variable ``SIZE`` (``ta.size_var("n", min=least)``, ``least``
        ``e`` unless given)."""
        needed = self._needed()
        lines = ["import tensorad as ta", "", f"DT = {dtype or self.dtype!r}", PRELUDE]
        if size is not None and size[1] is None:
            lines.append(f'SIZE = ta.size_var("n", min={size[0] if least is None else least})')

        def extent(e: int) -> str:
            return str(e) if size is None or e != size[0] else "SIZE" if size[1] is None else str(size[1])

        def shape(d: Def) -> str:
            return f"({''.join(extent(e) + ', ' for e in d.shape)[:-2]}{',' if len(d.shape) == 1 else ''})"
        for d in self.defs:
            if d.name not in needed:
                continue
            if d.body is None:
                lines.append(f"{d.name} = ta.placeholder({shape(d)}, {d.dtype}, name={d.name!r})")
                continue
            for r, lo, hi in d.raxes:
                lines.append(f"{r} = ta.reduce_axis(({lo}, {extent(hi)}), name={r!r})")
            if d.axes == ("topi",):  # a library layer
                lines.append(f"{d.name} = {d.body.render()}")
                continue
            if d.dtype != "DT":  # an integer compute: its casts fix its dtype
                lines.append(f"{d.name} = ta.compute({shape(d)}, lambda {', '.join(d.axes)}: "
                             f"{d.body.render()}, name={d.name!r})")
                continue
            lhs = ", ".join(d.names)
            lines.append(f"{lhs} = ta.compute({shape(d)}, lambda {', '.join(d.axes)}: {d.body.render()}, "
                         f"name={d.name!r}{', dtype=DT' if d.stored else ''})")
        ins = [d.name for d in self.placeholders]
        outs = [n for d in self.defs if d.body is not None and d.name in needed for n in d.names]
        lines += [f"INPUTS = [{', '.join(ins)}]", f"TENSORS = [{', '.join(outs)}]", f"OUT = {self.out}"]
        return "\n".join(lines) + "\n"

    @property
    def out_has_steps(self) -> bool:
        """Whether ``out`` depends on a step function of the data: its derivative is 0 wherever
        it exists, and finite differences across a step say nothing about it."""
        return bool(set(self.steps) & self._reaching_out())

    def _needed(self) -> set[str]:
        """Placeholders, and the computes ``out`` depends on (a shrunk program drops the rest)."""
        if not self.prune:
            return {n for d in self.defs for n in d.names} | {d.name for d in self.defs}
        return self._reaching_out()

    def _reaching_out(self) -> set[str]:
        by_name = {n: d for d in self.defs for n in d.names}
        keep = {d.name for d in self.placeholders}
        todo = [self.out]
        while todo:
            n = todo.pop()
            d = by_name[n]
            if d.name in keep and d.body is not None:
                continue
            keep.add(d.name)
            if d.body is not None:
                text = d.body.render()
                todo += [m for m in by_name if m not in keep and _mentions(text, m)]
        return keep

    def size(self) -> int:
        needed = self._needed()
        return sum(d.body.size() for d in self.defs if d.body is not None and d.name in needed)


def _mentions(text: str, name: str) -> bool:
    import re
    return re.search(rf"\b{re.escape(name)}(\[|[,)]|\.take\()", text) is not None


def _integer(name: str, d: Def) -> bool:
    """Whether output ``name`` of ``d`` holds integers: an integer tensor, or an argmax's index
    (``t0_i`` of an ``ARGMAX``/``ARGMIN``/:data:`TRIPLE` body; a ``SUMMAX`` body's ``t0_i`` is a
    float sum, 320234)."""
    return d.dtype != "DT" or (name.endswith("_i") and d.body is not None
                               and d.body.fmt.startswith(("ARGMAX(", "ARGMIN(", TRIPLE)))


def _index_value(r: random.Random, name: str, shape: tuple, ivars: list, muls: tuple) -> str:
    """An integer tensor ``name`` of ``shape`` read at in-range indices (a variable, wrapped when
    its range leaves the axis), half the time scaled by one of ``muls`` and shifted: a gather
    index that may leave its range."""
    at = []
    for s in shape:
        v, lo, hi = r.choice(ivars)
        at.append(v if lo >= 0 and hi <= s else f"({v} + {r.randint(0, 3)}) % {s}")
    value = f"{name}[{', '.join(at)}]" if at else f"{name}[()]"
    if r.random() < 0.5:
        value = f"({value} * {r.choice(muls)} + {r.randint(-1, 2)})"
    return value


def _take(name: str, d: Def, idx: list[str], guards: list[str], axis: int, value: str, mode: str) -> Node:
    """``name`` (the tensor ``d`` or an output of its op) read at ``idx`` with index ``axis``
    replaced by the integer expression ``value`` taken with ``mode``; under ``raise`` a guard
    keeps it in range where it runs (the gather's own check never fires)."""
    idx = list(idx)
    idx[axis] = value
    text = f"{name}.take({', '.join(idx)}, mode={mode!r})"
    if d.dtype != "DT" or name != d.name:
        text = f"ta.cast(DT, {text})"
    if mode == "raise":
        guards = guards + [f"({value} >= 0)", f"({value} < {d.shape[axis]})"]
    if guards:
        return Node("ta.if_then_else(" + " & ".join(guards).replace("{", "{{") + ", {0}, 0.0)",
                    (leaf(text, "v"),), "v")
    return leaf(text, "v")


def _prod(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


# a combiner of three values written in the body: the index of the largest second value (ties
# to the left), that value, and the sum of the third (drawn from a stream of its own)
TRIPLE = ("ta.comm_reducer(lambda x, y: (ta.select(x[1] >= y[1], x[0], y[0]), ta.maximum(x[1], y[1]), "
          "x[2] + y[2]), lambda a, b, c: (ta.const(-1, a), ta.min_value(b), ta.const(0, c)), name='triple')")

PRELUDE = '''
def _argmax_combine(x, y):
    keep = x[1] >= y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMAX = ta.comm_reducer(_argmax_combine, lambda ti, tv: (ta.const(-1, ti), ta.min_value(tv)),
                         name="argmax")
MYPROD = ta.comm_reducer(lambda x, y: x * y, lambda t: ta.const(1, t), name="myprod")
MYSUM = ta.comm_reducer(lambda x, y: y + x, lambda t: ta.const(0, t), name="mysum")


def _argmin_combine(x, y):  # strict: a tie goes to the right operand (the later element)
    keep = x[1] < y[1]
    return ta.select(keep, x[0], y[0]), ta.select(keep, x[1], y[1])


ARGMIN = ta.comm_reducer(_argmin_combine, lambda ti, tv: (ta.const(-1, ti), ta.max_value(tv)),
                         name="argmin")
MAXABS = ta.comm_reducer(lambda x, y: ta.select(ta.abs(x) >= ta.abs(y), x, y), lambda t: ta.const(0, t),
                         name="maxabs")
SUMMAX = ta.comm_reducer(lambda x, y: (x[0] + y[0], ta.maximum(x[1], y[1])),
                         lambda a, b: (ta.const(0, a), ta.min_value(b)), name="summax")
'''


class Forms:
    """Forms added later, drawn from a stream of their own (none without one), so that a seed
    that draws none of them makes the program it made before."""

    def __init__(self, rng: random.Random | None) -> None:
        self.r = rng

    def draw(self, p: float) -> bool:
        return self.r is not None and self.r.random() < p


class Generator:
    """Draws one program from a ``random.Random``."""

    def __init__(self, rng: random.Random, safe: bool, gather: random.Random | None = None,
                 extra: random.Random | None = None, more: random.Random | None = None,
                 forms: random.Random | None = None, forms21: random.Random | None = None,
                 forms22: random.Random | None = None, triple: random.Random | None = None,
                 forms27: random.Random | None = None, forms49: random.Random | None = None) -> None:
        self.r = rng
        self.m = more  # integer tensors, layers, half storage: a stream of their own
        self.f = Forms(forms)  # empty boxes, contractions, steps (module docstring)
        self.f21 = Forms(forms21)  # scans, data-dependent gathers, more layers
        self.f22 = Forms(forms22)  # :meth:`topi22_def` and the draws marked f22
        self.f22b = Forms(triple)  # the three-value combiner (a stream of its own)
        self.f27 = Forms(forms27)  # small integer powers
        self.f49 = Forms(forms49)  # running windows past their output (:meth:`window_def`)
        # draws added after the generator's first version: a stream of their own, so that
        # every seed still makes the program it made before, now and then with an addition
        self.x = extra
        self.safe = safe
        self.steps: tuple[str, ...] = ()  # :attr:`Program.steps`
        self.big = rng.random() < 0.1  # index products past int32 in this program
        # gathers draw from their own generator, so every other draw of a seed stays as it was
        self.g = gather
        self.gathers = gather is not None and gather.random() < 0.3
        self.gshape = tuple(gather.choice(SIZES) for _ in range(gather.choice((1, 1, 2)))) \
            if self.gathers else ()

    def extra(self, p: float) -> bool:
        """An addition to the first version, drawn with probability ``p`` (never without
        ``extra``: the first version's programs)."""
        return self.x is not None and self.x.random() < p

    def shape(self) -> tuple[int, ...]:
        return tuple(self.r.choice(SIZES) for _ in range(self.r.choice((0, 1, 1, 2, 2, 2, 3))))

    # ---- indices -------------------------------------------------------------------------
    def index(self, size: int, ivars: list) -> tuple[str, list[str]]:
        """An index expression into an axis of ``size`` and the guards it needs."""
        r = self.r
        if not ivars or r.random() < 0.1:
            return str(r.randrange(size)), []
        name, lo, hi = r.choice(ivars)
        kind = r.choice(["direct", "direct", "mod", "rev", "div", "flat", "guard", "guard", "neg", "cast"]
                        + ["big"] * self.big)
        c = r.randint(-3, 3)
        if kind == "direct" and lo >= 0 and hi <= size:
            return name, []
        if kind == "rev":
            return f"{size - 1} - {name} % {size}", []
        if kind == "div":
            return f"({name} + {c}) // {r.choice((2, 3))} % {size}", []
        if kind == "flat" and len(ivars) > 1:
            other = r.choice([v for v in ivars if v[0] != name])[0]
            return f"({name} * {r.choice((2, 3))} + {other}) % {size}", []
        if kind == "neg":
            return f"({c} - {name} * {r.choice((1, 2))}) % {size}", []
        if kind == "big":  # products past int32: index arithmetic must be exact
            m = r.choice((100003, (1 << 30) + 1, 1 << 30))
            m = 2147516416 if self.extra(0.3) else m  # a constant past int32 itself
            return f"({name} * {m} + {c}) % {size}", []
        if kind == "cast":
            return f"ta.cast('int32', ta.cast('int64', {name}) * {r.choice((3, 5))} % {size})", []
        if kind == "guard":
            e = f"{name} + {c}" if c >= 0 else f"{name} - {-c}"
            return e, [f"({e} >= 0)", f"({e} < {size})"]
        return f"({name} + {c}) % {size}", []

    def read(self, pool: list[Def], ivars: list) -> Node:
        pool = [d for d in pool if 0 not in d.shape]  # (an empty compute is never read)
        d = self.r.choice(pool)
        name = d.names[self.r.randrange(len(d.names))]
        idx, guards = [], []
        for s in d.shape:
            i, g = self.index(s, ivars)
            idx.append(i)
            guards += g
        text = f"{name}[{', '.join(idx)}]" if idx else f"{name}[()]"
        if self.gathers and idx and ivars and self.g.random() < 0.4:
            return self.gather_read(name, d, idx, guards, ivars)
        if idx and ivars and self.f21.draw(0.05):
            node = self.data_gather(pool, name, d, idx, guards, ivars)
            if node is not None:
                return node
        if d.dtype != "DT" or name != d.name:  # an integer tensor, or an argmax's index output
            text = f"ta.cast(DT, {text})"
        if guards:
            pad = self.r.choice(("0.0", "-1.0"))
            return Node("ta.if_then_else(" + " & ".join(guards).replace("{", "{{") + ", {0}, " + pad + ")",
                        (leaf(text, "v"),), "v")
        return leaf(text, "v")

    def gather_read(self, name: str, d: Def, idx: list[str], guards: list[str], ivars: list) -> Node:
        """``name`` read with one index taken from the integer input ``g`` (values in [-3, 3]):
        clipped, wrapped, or checked under a guard that keeps it in range."""
        g = self.g
        axis = g.randrange(len(idx))
        value = _index_value(g, "g", self.gshape, ivars, (1, 2, -1))
        return _take(name, d, idx, guards, axis, value, g.choice(("clip", "wrap", "raise")))

    def data_gather(self, pool: list[Def], name: str, d: Def, idx: list[str], guards: list[str],
                    ivars: list) -> Node | None:
        """``name`` read with one index taken from an integer tensor of the program (drawn from
        the stream ``f21``): an integer input, an integer compute (casts of data included), a
        comparison stored as int32, an argmax's index -- a data-dependent index, clipped,
        wrapped, or checked under a guard."""
        r = self.f21.r
        ints = [(n, e) for e in pool for n in e.names if _integer(n, e)]
        if not ints:
            return None
        n, e = r.choice(ints)
        value = _index_value(r, n, e.shape, ivars, (1, 2, -1, 3))
        return _take(name, d, idx, guards, r.randrange(len(idx)), value, r.choice(("clip", "wrap", "raise")))

    def cond(self, ivars: list) -> str:
        r = self.r
        name, lo, hi = r.choice(ivars)
        c = r.randint(lo, max(lo, hi - 1))
        forms = [f"{name} < {c}", f"{name} >= {c}", f"{name} % 2 == 0", f"{name} != {c}"]
        if len(ivars) > 1:
            other = r.choice([v for v in ivars if v[0] != name])[0]
            forms += [f"({name} + {other}) % 3 == 1", f"(2 * {name} - {other} + {c}) % 5 == 0",
                      f"({name} % 2 == {c % 2}) & ({other} <= {c})"]
        cond = r.choice(forms)
        if self.f22.draw(0.1):  # the logical not of a condition
            cond = f"~({cond})"
        return cond

    # ---- values --------------------------------------------------------------------------
    def expr(self, pool: list[Def], ivars: list, depth: int, nest: list | None = None) -> Node:
        r = self.r
        kinds = ["read", "read", "read", "const"] + (["ivalue"] if ivars else [])
        if depth > 0:
            kinds += ["unary", "unary", "binary", "binary", "binary", "select"] + (["ite"] if ivars else [])
            if nest is not None:
                kinds.append("nested")
        kind = r.choice(kinds)
        if kind == "read":
            return self.read(pool, ivars)
        if kind == "const":
            return leaf(f"ta.const({r.choice(CONSTS)}, DT)", "v")
        if kind == "ivalue":
            name, _, _ = r.choice(ivars)
            c = r.randint(-3, 2)
            form = r.choice([f"ta.cast(DT, {name} + {c})", f"ta.cast(DT, ({name} + {c}) // 2)",
                             f"ta.cast(DT, ({name} - 2) % 3)",
                             f"ta.cast(DT, ta.cast('int64', {name}) * 3 - {r.randint(0, 5)})"])
            if self.f22.draw(0.15):  # floor division and modulo by a negative constant (Python's rules)
                form = self.f22.r.choice([f"ta.cast(DT, ({name} + {c}) // -2)",
                                          f"ta.cast(DT, ({name} + {c}) % -3)",
                                          f"ta.cast(DT, ta.cast('int64', {name} - 3) % -4 * 2)",
                                          f"ta.cast(DT, (-{name} - 1) // -3 + ({name} + {c}) % -2)"])
            return leaf(form, "v")
        sub = lambda: self.expr(pool, ivars, depth - 1, nest)  # noqa: E731
        if kind == "unary":
            return self.unary(sub())
        if kind == "binary":
            return self.binary(sub(), sub())
        if kind == "select":
            a, b = sub(), sub()
            if r.random() < 0.3 and ivars:
                return Node(f"ta.select({self.cond(ivars)}, {{0}}, {{1}})", (a, b), "v")
            op = r.choice(("<", "<=", ">", "=="))
            if self.f22.draw(0.2):
                op = self.f22.r.choice((">=", "!="))
            return Node(f"ta.select({{0}} {op} {{1}}, {{0}}, {{2}})", (a, b, sub()), "v")
        if kind == "ite":
            return Node(f"ta.if_then_else({self.cond(ivars)}, {{0}}, {{1}})", (sub(), sub()), "v")
        # a reduction inside a larger body: the language lifts it into a tensor of its own
        red = self.reduction(pool, ivars, depth - 1, nest, custom=False)
        return Node("{0} * 0.5 + {1}", (red, sub()), "v")

    def unary(self, x: Node) -> Node:
        safe = {"neg": "-({0})", "abs": "ta.abs({0})", "tanh": "ta.tanh({0})", "sigmoid": "ta.sigmoid({0})",
                "sin": "ta.sin({0})", "cos": "ta.cos({0})", "exp": "ta.exp(ta.minimum({0}, 3.0))",
                "log": "ta.log(ta.abs({0}) + 0.5)", "sqrt": "ta.sqrt(ta.abs({0}) + 0.25)",
                "pow": "ta.power(ta.abs({0}) + 0.5, 1.5)", "sq": "({0}) * ({0})"}
        raw = {"exp": "ta.exp({0})", "log": "ta.log({0})", "sqrt": "ta.sqrt({0})",
               "rsqrt": "1.0 / ta.sqrt({0})", "recip": "1.0 / ({0})", "pow": "ta.power({0}, 0.5)",
               "pow2": "ta.power({0}, 2.0)"}
        table = dict(safe) if self.safe else {**safe, **raw}
        form = table[self.r.choice(sorted(table))]
        if not self.safe and self.f21.draw(0.15):  # rounded to half inside a body (a step)
            form = f"ta.cast(DT, ta.cast({self.f21.r.choice(HALF)!r}, {form}))"
        if not self.safe and self.f22.draw(0.1):  # rounded to float32, or truncated to an integer
            form = f"ta.cast(DT, ta.cast({self.f22.r.choice(('float32', 'int32', 'int64'))!r}, {form}))"
        return Node("ta.erf({0})" if self.extra(0.08) else form, (x,), "v")

    def binary(self, a: Node, b: Node) -> Node:
        forms = ["{0} + {1}", "{0} - {1}", "{0} * {1}", "{0} / (ta.abs({1}) + 1.0)", "ta.maximum({0}, {1})",
                 "ta.minimum({0}, {1})"]
        if not self.safe:
            forms += ["{0} / {1}", "ta.power({0}, {1})"]
        form = self.r.choice(forms)
        if not self.safe and self.f.draw(0.15):  # floor division and modulo of float data
            form = self.f.r.choice(("{0} // {1}", "{0} % {1}", "{0} % 0.75", "{0} // -0.5"))
        if self.f22.draw(0.08):  # the ``**`` operator (``Expr.__pow__``), a constant exponent too
            safe = ("(ta.abs({0}) + 0.5) ** (ta.tanh({1}) + 1.0)", "({0}) ** 2 + {1}",
                    "{1} - (ta.abs({0}) + 1.0) ** -0.5")
            raw = ("{0} ** {1}", "({0}) ** 2 + {1}", "{1} - ({0}) ** -1.0", "{0} ** 0.5 + {1}")
            form = self.f22.r.choice(safe if self.safe else raw)
        if self.f27.draw(0.08):  # small integer powers: multiplied under fast math, exact ones always
            safe = ("({0}) ** 3 + {1}", "({0}) ** 4 - {1}", "{1} * (ta.abs({0}) + 0.5) ** -2",
                    "(ta.abs({0}) + 1.0) ** -3.0 + {1}", "{1} / (ta.abs({0}) + 1.0) ** 4")
            raw = ("({0}) ** 3 + {1}", "{1} - ({0}) ** -2.0", "({0}) ** 4 * {1}", "{1} + ({0}) ** -3",
                   "ta.power({0}, -4.0) - {1}")
            form = self.f27.r.choice(safe if self.safe else raw)
        return Node("(" + form + ")", (a, b), "v")

    def reduction(self, pool, ivars, depth, nest: list, custom: bool) -> Node:
        """A reduction node; its reduce axes are appended to ``nest`` (declared before the def)."""
        r = self.r
        raxes = []
        for _ in range(r.choice((1, 1, 2))):
            lo = r.choice((0, 0, 1, -1))
            hi = lo + r.choice((1, 2, 3, 4, 5, 2, 3, 9, 17))
            raxes.append((f"r{len(nest)}", lo, lo if self.f.draw(0.04) else hi))  # an empty box
            nest.append(raxes[-1])
        inner = list(ivars) + raxes
        src = self.expr(pool, inner, max(depth, 0))
        if self.f21.draw(0.1):  # a reduction in the source, reading this one's axes (``forms21``)
            src = Node("{0} * {1}", (src, self.reduction(pool, inner, 0, nest, custom=False)), "v")
        where = leaf(f", where={self.cond(inner)}" if r.random() < 0.35 else "", "w")
        if where.fmt and self.m is not None and self.m.random() < 0.25:  # a mask on data
            where = leaf(f", where=({self.read(pool, inner).render()}) > 0.0", "w")
        if ivars and self.f21.draw(0.1):  # a scan: a prefix (or suffix) of the box per outer point
            v = self.f21.r.choice(ivars)[0]
            op, c = self.f21.r.choice(("<=", ">=", "<")), self.f21.r.randint(-1, 1)
            where = leaf(f", where={raxes[0][0]} {op} {v} + {c}", "w")
        axis = "[" + ", ".join(a[0] for a in raxes) + "]"
        if len(raxes) == 1 and self.f22.draw(0.2):  # one reduce axis given bare, not in a list
            axis = raxes[0][0]
        names = ["ta.sum", "ta.sum", "ta.max", "ta.min", "ta.prod"] + (["MYPROD", "MYSUM", "ARGMAX"] if custom
                                                                       else [])
        red = r.choice(names)
        flat = raxes[0][0] if len(raxes) == 1 else f"{raxes[0][0]} * 7 + {raxes[1][0]}"  # (an index value)
        if custom and self.f22b.draw(0.05):  # a combiner of three values: an index, a max and a sum
            return Node(f"{TRIPLE}(({flat}, {{0}}, ta.abs({{0}}) * 0.5), axis={axis}{{1}})", (src, where),
                        "r3")
        if red == "ARGMAX":
            red = "ARGMIN" if self.extra(0.4) else red  # the other tie rule
            return Node(f"{red}(({flat}, {{0}}), axis={axis}{{1}})", (src, where), "r")
        if red == "MYPROD" and self.m is not None and self.m.random() < 0.3:  # a selecting combiner
            return Node(f"MAXABS({{0}}, axis={axis}{{1}})", (src, where), "v")
        if red == "MYSUM" and self.extra(0.4):  # a combiner of two float values
            return Node(f"SUMMAX(({{0}}, ta.abs({{0}}) * 0.5), axis={axis}{{1}})", (src, where), "r")
        return Node(f"{red}({{0}}, axis={axis}{{1}})", (src, where), "v")

    # ---- running windows (``forms49``) --------------------------------------------------------
    def window_def(self, defs: list[Def], n_red: int, name: str, last: bool) -> Def | None:
        """A running reduction along one axis of an earlier float tensor ``X`` (the last one when
        ``last``), drawn from the stream ``f49``: ``Y[.., j, ..] = red_{r in window(j)} f(X[.., r, ..])``,
        the window a prefix ``r <= j + c`` (or ``<``) or a suffix ``r >= j - c`` (or ``>``) for ``c`` from
        -2 to 3 -- past its own output for ``c > 0`` -- over ``X``'s axis (from 0 or 1), ``Y``'s extent
        along it ``X``'s or one off; spelled as a ``where`` or as ``f`` padded with the reducer's identity
        under ``if_then_else``; ``f`` a read or a function of it; every built-in reducer and the custom
        combiners (a product, a sum, argmax and argmin, the value of largest magnitude, ``(sum, max)``)."""
        floats = [d for d in defs if d.dtype == "DT" and len(d.names) == 1 and d.shape and 0 not in d.shape]
        if last:
            floats = floats[-1:] if floats and floats[-1] is defs[-1] else []
        if not floats:
            return None
        main, self.r = self.r, self.f49.r
        try:
            r = self.r
            d = r.choice(floats)
            long = [a for a, s in enumerate(d.shape) if s > 1]
            ax = r.choice(long or range(len(d.shape)))
            n = d.shape[ax]
            m = max(1, n + r.choice((0, 0, 0, -1, 1)))
            shape = d.shape[:ax] + (m,) + d.shape[ax + 1:]
            axes = tuple(f"i{k}" for k in range(len(shape)))
            k, j, lo = f"r{n_red}", axes[ax], r.choice((0, 0, 0, 1))
            src = leaf(f"{d.name}[{', '.join(k if a == ax else v for a, v in enumerate(axes))}]", "v")
            if r.random() < 0.4:
                src = Node(r.choice(("ta.tanh({0})", "({0}) * ({0})", "ta.abs({0}) + 0.5", "-({0})",
                                     "ta.exp(ta.minimum({0}, 3.0))", "ta.sin({0}) * 2.0")), (src,), "v")
            c = r.choice((-2, -1, 0, 1, 1, 2, 2, 3))
            op, sign = r.choice((("<=", "+"), ("<", "+"), (">=", "-"), (">", "-")))
            shift = f" {sign} {c}" if c > 0 else f" {'-' if sign == '+' else '+'} {-c}" if c < 0 else ""
            cond = f"{k} {op} {j}{shift}"
            red = r.choice(("ta.sum", "ta.max", "ta.min", "ta.prod", "MYPROD", "MYSUM", "ARGMAX", "ARGMIN",
                            "MAXABS", "SUMMAX"))
            low = {"ta.sum": "0.0", "MYSUM": "0.0", "ta.prod": "1.0", "MYPROD": "1.0", "MAXABS": "0.0",
                   "ta.min": "ta.max_value(DT)", "ARGMIN": "ta.max_value(DT)"}.get(red, "ta.min_value(DT)")
            values = {"ARGMAX": ("{0}",), "ARGMIN": ("{0}",), "SUMMAX": ("{0}", "ta.abs({0}) * 0.5")}.get(red)
            pad = r.random() < 0.5
            if values is None:
                fmt = f"{red}(ta.if_then_else({cond}, {{0}}, {low}), axis=[{k}])" if pad else \
                    f"{red}({{0}}, axis=[{k}], where={cond})"
                names, ty = (name,), "v"
            else:
                lows = ("0.0", "ta.min_value(DT)") if red == "SUMMAX" else (low,)
                if pad:
                    values = tuple(f"ta.if_then_else({cond}, {v}, {w})" for v, w in zip(values, lows))
                parts = ((k,) if red != "SUMMAX" else ()) + values
                fmt = f"{red}(({', '.join(parts)}), axis=[{k}]{'' if pad else ', where=' + cond})"
                names, ty = (f"{name}_i", name), "r"
            return Def(names, shape, "DT", Node(fmt, (src,), ty), axes, ((k, lo, n),))
        finally:
            self.r = main

    # ---- integer tensors (``more``) -----------------------------------------------------------
    def int_def(self, defs: list[Def], n_red: int, name: str) -> Def:
        """An ``int32``/``int64`` compute drawn from the stream ``m`` alone (so that the rest of
        the program stays as its seed made it): index values, integer inputs, saturating casts
        of float data (inf and NaN included), runtime ``//``/``%`` (a zero divisor gives 0),
        or an integer reduction."""
        main, self.r = self.r, self.m
        try:
            r = self.r
            shape = self.shape()
            axes = tuple(f"i{k}" for k in range(len(shape)))
            ivars = [(a, 0, s) for a, s in zip(axes, shape)]
            ints = [d for d in defs if d.dtype in ("'int32'", "'int64'") and 0 not in d.shape]
            floats = [d for d in defs if d.dtype == "DT" and 0 not in d.shape]
            it = r.choice(("int32", "int32", "int64"))

            def ival(vs) -> str:
                forms, of_data = [], None
                if vs:
                    v = r.choice(vs)[0]
                    forms.append(f"ta.cast('{it}', {v} * {r.randint(-3, 3)} - {r.randint(0, 4)})")
                if ints:
                    forms.append(f"ta.cast('{it}', {self._int_read(r.choice(ints), vs)})")
                if floats:
                    x = self.read(floats, vs).render()
                    of_data = f"ta.cast('{it}', ({x}) * {r.choice(('3.0', '0.5', '1e10', '-7.5'))})"
                    forms.append(of_data)
                pick = r.choice(forms or [f"ta.const({r.randint(-4, 4)}, '{it}')"])
                if pick == of_data and name not in self.steps:
                    self.steps = (*self.steps, name)
                return pick

            nest: list = []
            form = r.choice(("arith", "div", "mod", "select", "reduce"))
            if form == "reduce" and (ints or floats):
                lo = r.choice((0, 1, -1))
                rname = f"r{n_red}"
                nest.append((rname, lo, lo + r.choice((1, 2, 3, 5, 9))))
                red = r.choice(("ta.sum", "ta.max", "ta.min", "ta.prod"))
                body = f"{red}({ival(ivars + nest)}, axis=[{rname}])"
            elif form in ("div", "mod"):
                op = "//" if form == "div" else "%"
                body = f"({ival(ivars)} {op} {ival(ivars)})"
            elif form == "select":
                a, b = ival(ivars), ival(ivars)
                body = f"ta.select({a} < {b}, {a}, {b} * {r.choice((2, -1))})"
            else:
                body = f"({ival(ivars)} {r.choice(('+', '-', '*'))} {ival(ivars)})"
            return Def((name,), shape, f"'{it}'", leaf(body, "i"), axes, tuple(nest))
        finally:
            self.r = main

    def _int_read(self, d: Def, ivars: list) -> str:
        """``d`` read at in-range indices: a variable (wrapped when its range leaves the axis)
        or a constant."""
        r, idx = self.r, []
        for s in d.shape:
            if not ivars or r.random() < 0.2:
                idx.append(str(r.randrange(s)))
                continue
            v, lo, hi = r.choice(ivars)
            idx.append(v if lo >= 0 and hi <= s else f"({v} + {r.randint(-2, 2)}) % {s}")
        return f"{d.name}[{', '.join(idx)}]" if idx else f"{d.name}[()]"

    # ---- contractions and comparisons (``forms``) --------------------------------------------
    def contraction(self, defs: list[Def], n_red: int, c: int) -> list[Def]:
        """Two inputs of their own and their product over ``r`` (drawn from the stream ``f``):
        ``sum(a[i, r] * b[r, j])`` with either side transposed, a batch axis, a triangular
        ``where``, an offset reduction range -- the forms the GEMM strategies match, at sizes
        up to 24 (the micro-kernel strategies run when the options ask for them)."""
        r = self.f.r
        m, n, k = (r.choice((1, 3, 8, 13, 17, 24)) for _ in range(3))
        batch = (r.choice((2, 3)),) if r.random() < 0.25 else ()
        rname, lo = f"r{n_red}", r.choice((0, 0, 0, 1))
        p = ["p"] if batch else []
        ta_, tb = r.random() < 0.3, r.random() < 0.3
        a_shape = batch + ((k + lo, m) if ta_ else (m, k + lo))
        b_shape = batch + ((n, k + lo) if tb else (k + lo, n))
        a_idx = p + ([rname, "i"] if ta_ else ["i", rname])
        b_idx = p + (["j", rname] if tb else [rname, "j"])
        a, b = Def((f"a{c}",), a_shape), Def((f"b{c}",), b_shape)
        src = f"a{c}[{', '.join(a_idx)}] * b{c}[{', '.join(b_idx)}]"
        if r.random() < 0.3:  # an elementwise factor inside the sum
            src += r.choice((f" * ta.tanh(a{c}[{', '.join(a_idx)}])", " * 0.5"))
        where = ""
        if r.random() < 0.25:
            where = r.choice((f", where={rname} <= i + {lo}", f", where={rname} >= j % {k} + {lo}",
                              f", where=({rname} + i) % 2 == 0"))
        red = r.choice(("ta.sum", "ta.sum", "ta.sum", "ta.max"))
        body = f"{red}({src}, axis=[{rname}]{where})"
        if r.random() < 0.4:  # an epilogue in the same body
            body = r.choice((f"ta.maximum({body}, 0.0)", f"{body} * 2.0 + a{c}[{', '.join(p + ['0', '0'])}]",
                             f"ta.tanh({body})"))
        axes = tuple(p + ["i", "j"])
        out = Def((f"c{c}",), batch + (m, n), "DT", leaf(body, "v"), axes, ((rname, lo, k + lo),))
        return [a, b, out]

    def comparison_def(self, defs: list[Def], name: str) -> Def | None:
        """Comparisons of data (``&``, ``|``, ``!=``) stored as an int32 tensor: a step of the
        data, read elsewhere as a value (drawn from the stream ``f``)."""
        floats = [d for d in defs if d.dtype == "DT" and 0 not in d.shape]
        if not floats:
            return None
        main, self.r = self.r, self.f.r
        try:
            shape = self.shape()
            axes = tuple(f"i{k}" for k in range(len(shape)))
            ivars = [(a, 0, s) for a, s in zip(axes, shape)]
            x, y = (self.read(floats, ivars).render() for _ in range(2))
            op = self.r.choice(("|", "&"))
            cond = f"(({x}) > ({y})) {op} (({x}) != {self.r.choice(('0.0', '-1.0'))})"
            self.steps = (*self.steps, name)
            return Def((name,), shape, "'int32'", leaf(f"ta.cast('int32', {cond})", "i"), axes)
        finally:
            self.r = main

    # ---- library layers (``more``) ------------------------------------------------------------
    def topi_def(self, defs: list[Def], name: str) -> Def | None:
        """A ``ta.topi`` layer on an earlier float tensor (drawn from the stream ``m``): its
        body is the call, its shape the layer's.  None when no tensor fits."""
        r = self.m
        floats = [d for d in defs if d.dtype == "DT" and len(d.names) == 1 and 0 not in d.shape]
        if not floats:
            return None
        d = r.choice(floats)
        x, s, n = d.name, d.shape, len(d.shape)
        ax = r.randrange(n) if n else 0
        forms = [(f"ta.topi.add({x}, {x} * 0.5)", s), (f"ta.topi.nn.gelu({x})", s)]
        if n:
            keep = r.random() < 0.3
            red = s[:ax] + ((1,) if keep else ()) + s[ax + 1:]
            forms += [(f"ta.topi.nn.softmax({x}, axis={ax - n})", s),
                      (f"ta.topi.sum({x}, axis={ax}, keepdims={keep})", red),
                      (f"ta.topi.max({x}, axis={ax}, keepdims={keep})", red),
                      (f"ta.topi.mean({x}, axis={ax}, keepdims={keep})", red),
                      (f"ta.topi.nn.layer_norm({x}, ndim=1)", s),
                      (f"ta.topi.reshape({x}, ({_prod(s)},))", (_prod(s),))]
            if not self.safe:
                forms.append((f"ta.topi.nn.relu({x})", s))
        if n >= 2:
            perm = list(range(n))
            r.shuffle(perm)
            forms.append((f"ta.topi.transpose({x}, {tuple(perm)!r})", tuple(s[p] for p in perm)))
        if n == 2:
            forms.append((f"ta.topi.matmul({x}, ta.topi.transpose({x}, (1, 0)))", (s[0], s[0])))
        body, shape = r.choice(forms)
        return Def((name,), tuple(shape), "DT", leaf(body, "t"), ("topi",))

    def topi21_def(self, defs: list[Def], name: str) -> Def | None:
        """More ``ta.topi`` layers on an earlier float tensor, read by the raw computes after it
        (drawn from the stream ``f21``): variance (and, in programs that are not ``safe``, with
        no degree of freedom left: inf and NaN), log-softmax, SiLU, RMS norm, min and product
        reductions, reductions over every axis, broadcasting against a reduction, padding,
        ``dense``, and ``take`` with an integer tensor of the program as indices."""
        r = self.f21.r
        floats = [d for d in defs if d.dtype == "DT" and len(d.names) == 1 and 0 not in d.shape]
        if not floats:
            return None
        d = r.choice(floats)
        x, s, n = d.name, d.shape, len(d.shape)
        forms = [(f"ta.topi.nn.silu({x})", s), (f"ta.topi.sum({x})", ())]
        if n:
            ax = r.randrange(n)
            keep = r.random() < 0.3
            red = s[:ax] + ((1,) if keep else ()) + s[ax + 1:]
            if self.safe:  # no degree of freedom left (inf, NaN) only where derivatives are not checked
                ddof = r.choice((0, 1)) if s[ax] > 1 else 0
            else:
                ddof = r.randint(0, s[ax] + 1)
            before, after = tuple(r.randint(0, 2) for _ in s), tuple(r.randint(0, 2) for _ in s)
            forms += [(f"ta.topi.var({x}, axis={ax}, keepdims={keep}, ddof={ddof})", red),
                      (f"ta.topi.nn.log_softmax({x}, axis={ax - n})", s),
                      (f"ta.topi.nn.rms_norm({x})", s),
                      (f"ta.topi.min({x}, axis={ax}, keepdims={keep})", red),
                      (f"ta.topi.prod({x}, axis={ax}, keepdims={keep})", red),
                      (f"ta.topi.mean({x}, axis={tuple(range(n))!r})", ()),
                      (f"ta.topi.subtract({x}, ta.topi.mean({x}, axis={ax}, keepdims=True))", s),
                      (f"ta.topi.divide({x}, ta.topi.add(ta.topi.sum(ta.topi.multiply({x}, {x}), axis={ax}, "
                       "keepdims=True), 1.0))", s),
                      (f"ta.topi.nn.pad({x}, {before!r}, {after!r}, {r.choice((0.0, -1.5))})",
                       tuple(a + b + c for a, b, c in zip(s, before, after)))]
            ints = [(m, e) for e in defs for m in e.names if _integer(m, e) and 0 not in e.shape]
            if ints:
                m, e = r.choice(ints)
                forms.append((f"ta.topi.take({x}, {m}, axis={ax}, mode={r.choice(('clip', 'wrap'))!r})",
                              s[:ax] + e.shape + s[ax + 1:]))
        if n == 2:
            forms.append((f"ta.topi.nn.dense({x}, {x})", (s[0], s[0])))
        body, shape = r.choice(forms)
        return Def((name,), tuple(shape), "DT", leaf(body, "t"), ("topi",))

    def topi22_def(self, defs: list[Def], name: str) -> Def | None:
        """Library calls no earlier stream draws, on an earlier float tensor (drawn from the
        stream ``f22``): ``ta.topi`` math (``exp``, ``log``, ``erf``, ``negative``, ``power``,
        ``maximum`` with a scalar), ``flatten``, ``expand_dims``, ``concatenate``, ``dense`` with a
        bias, ``layer_norm`` with ``gamma`` and ``beta``, ``cross_entropy`` (labels computed in
        range, every ``reduction``), ``embedding`` of an integer tensor of the program (clipped or
        wrapped), attention (causal or not), ``conv2d`` and ``pool`` on a reshaped tensor, and
        ``ta.generalized_matmul`` (one or two contracted axes)."""
        r = self.f22.r
        floats = [d for d in defs if d.dtype == "DT" and len(d.names) == 1 and 0 not in d.shape]
        if not floats:
            return None
        d = r.choice(floats)
        x, s, n = d.name, d.shape, len(d.shape)
        log = f"ta.topi.add(ta.topi.multiply({x}, {x}), 0.5)" if self.safe else x
        log = f"ta.topi.log({log})"
        forms = [(f"ta.topi.exp(ta.topi.multiply({x}, 0.5))", s), (log, s), (f"ta.topi.erf({x})", s),
                 (f"ta.topi.negative({x})", s), (f"ta.topi.maximum({x}, 0.25)", s),
                 (f"ta.topi.power(ta.topi.add(ta.topi.abs({x}), 0.5), 1.5)", s)]
        ax = r.randint(0, n)
        forms.append((f"ta.topi.expand_dims({x}, {ax})", s[:ax] + (1,) + s[ax:]))
        if n:
            ax = r.randrange(n)
            forms.append((f"ta.topi.concatenate([{x}, ta.topi.multiply({x}, -2.0)], axis={ax})",
                          s[:ax] + (2 * s[ax],) + s[ax + 1:]))
        if n >= 2:
            forms.append((f"ta.topi.nn.flatten({x})", (s[0], _prod(s[1:]))))
        if n == 2:
            a, b = s
            forms += [(f"ta.topi.nn.dense({x}, {x}, ta.topi.sum({x}, axis=1))", (a, a)),
                      (f"ta.topi.nn.layer_norm({x}, ta.topi.mean({x}, axis=0), ta.topi.max({x}, axis=0))", s),
                      (f"ta.generalized_matmul({x}, ta.topi.transpose({x}, (1, 0)), 1)", (a, a)),
                      (f"ta.generalized_matmul({x}, {x}, 2)", ()),
                      (f"ta.topi.nn.scaled_dot_product_attention({x}, {x}, {x}, causal={r.random() < 0.5})",
                       s)]
            red = r.choice(("mean", "sum", "none"))
            step = r.choice((1, 2, 3))
            labels = f"ta.compute(({a},), lambda i: ta.cast('int32', (i * {step} + 1) % {b}), " \
                     f"name='{name}_labels')"
            forms.append((f"ta.topi.nn.cross_entropy({x}, {labels}, reduction={red!r})",
                          (a,) if red == "none" else ()))
            ints = [(m, e) for e in defs for m in e.names if _integer(m, e) and 0 not in e.shape]
            if ints:
                m, e = r.choice(ints)
                mode = r.choice(("clip", "wrap"))
                forms.append((f"ta.topi.nn.embedding({x}, {m}, mode={mode!r})", e.shape + (b,)))
            kh, kw = r.randint(1, min(a, 3)), r.randint(1, min(b, 3))
            st, pad = r.choice((1, 1, 2)), r.randint(0, min(kh, kw) - 1)
            img = f"ta.topi.reshape({x}, (1, 1, {a}, {b}))"
            w = f"ta.compute((2, 1, {kh}, {kw}), lambda o, c, p, q: {x}[p, q] * (o + 0.5), name='{name}_w')"
            ho, wo = (a + 2 * pad - kh) // st + 1, (b + 2 * pad - kw) // st + 1
            forms += [(f"ta.topi.nn.conv2d({img}, {w}, {st}, {pad})", (1, 2, ho, wo)),
                      (f"ta.topi.nn.pool({img}, ({kh}, {kw}), ({st}, {st}), [{pad}, {pad}, {pad}, {pad}], "
                       f"{r.choice(('max', 'avg'))!r})", (1, 1, ho, wo))]
        body, shape = r.choice(forms)
        return Def((name,), tuple(shape), "DT", leaf(body, "t"), ("topi",))

    # ---- programs ------------------------------------------------------------------------
    def program(self, dtype: str) -> Program:
        r = self.r
        defs = [Def((f"x{k}",), self.shape()) for k in range(r.choice((1, 1, 2, 2, 3)))]
        if self.gathers:  # the integer input that gathers take their indices from
            defs.append(Def(("g",), self.gshape, "'int32'"))
        if r.random() < 0.15:  # an integer input, read as a value
            it = "'int64'" if self.f22.draw(0.4) else "'int32'"
            defs.append(Def((f"n{len(defs)}",), self.shape(), it))
        n_red = 0
        n_int = 0
        count = r.choice((1, 2, 2, 3, 4))
        for c in range(count):
            if self.m is not None and self.m.random() < 0.08:
                d = self.int_def(defs, n_red, f"k{n_int}")
                defs.append(d)
                n_red += len(d.raxes)
                n_int += 1
            if self.m is not None and self.m.random() < 0.1:
                d = self.topi_def(defs, f"L{c}")
                if d is not None:
                    defs.append(d)
            if self.f.draw(0.1):
                new = self.contraction(defs, n_red, c)
                defs += new
                n_red += len(new[-1].raxes)
            if self.f.draw(0.05):
                d = self.comparison_def(defs, f"m{c}")
                if d is not None:
                    defs.append(d)
            if self.f21.draw(0.08):
                d = self.topi21_def(defs, f"T{c}")
                if d is not None:
                    defs.append(d)
            if self.f22.draw(0.1):
                d = self.topi22_def(defs, f"U{c}")
                if d is not None:
                    defs.append(d)
            shape = self.shape()
            if shape and self.f.draw(0.04):  # an empty compute (nothing reads it)
                k = self.f.r.randrange(len(shape))
                shape = shape[:k] + (0,) + shape[k + 1:]
            axes = tuple(f"i{k}" for k in range(len(shape)))
            ivars = [(a, 0, s) for a, s in zip(axes, shape)]
            nest: list = []
            form = r.choice(("elementwise", "reduce", "reduce", "nested"))
            if form == "reduce":
                body = self.reduction(defs, ivars, 2, nest, custom=True)
            else:
                body = self.expr(defs, ivars, 2 if form == "elementwise" else 1, nest)
            nest = [(f"r{n_red + k}", lo, hi) for k, (_, lo, hi) in enumerate(nest)]
            body = _rename_raxes(body, len(nest), n_red)
            n_red += len(nest)
            name = f"t{c}"
            names = {"r": (f"{name}_i", name), "r3": (f"{name}_i", f"{name}_m", name)}.get(body.ty, (name,))
            if form == "elementwise" and self.f.draw(0.1):  # two outputs of one op
                other = self.expr(defs, ivars, 1, None)
                body, names = Node("({0}, {1})", (other, body), "x"), (f"{name}_b", name)
            stored = dtype in HALF and body.ty not in ("r", "r3") and self.f.draw(0.3)
            defs.append(Def(names, shape, "DT", body, axes, tuple(nest), stored))
            if self.f49.draw(0.04 if c else 0.02) or c == count - 1 and self.f49.draw(0.1):
                d = self.window_def(defs, n_red, f"w{c}", c == count - 1)
                if d is not None:
                    defs.append(d)
                    n_red += 1
        last = defs[-1]
        return Program(dtype, tuple(defs), last.name, self.safe, steps=self.steps)


def _rename_raxes(node: Node, n: int, offset: int) -> Node:
    """Reduce axes are numbered per def while drawing; number them per program."""
    if offset == 0 or n == 0:
        return node
    import re

    def sub(text: str) -> str:
        return re.sub(r"\br(\d+)\b", lambda m: f"r{int(m.group(1)) + offset}", text)

    return Node(sub(node.fmt), tuple(_rename_raxes(k, n, offset) for k in node.kids), node.ty)


def generate(seed: int, dtype: str | None = None, extras: bool = True, forms: bool = True,
             forms21: bool = True, forms22: bool = True, forms27: bool = True,
             forms49: bool = True) -> Program:
    """The program of ``seed`` (deterministic), with its data profile and build options;
    ``extras=False`` gives the generator's first version (erf, argmin, a two-value combiner,
    constants past int32, ``opt_level=3`` and ``parallel=False`` came later, drawn from a
    stream of their own so that they change a third of the programs and leave the rest);
    ``forms=False``: without the forms of the stream ``forms`` (:class:`Forms`), the program a
    seed made before them (what the regression tests of older seeds pin); ``forms21=False``:
    without those of ``forms21`` and later; ``forms22=False``: without those of ``forms22`` and
    later; ``forms27=False``: without those of ``forms27`` and later; ``forms49=False``: without
    those of ``forms49`` (each the programs seeds drew before its forms were added)."""
    from .options import draw_options

    r = random.Random(seed)
    drawn = dtype is None
    dtype = dtype or r.choice(("float32", "float64", "float64"))
    safe = r.random() < 0.7
    extra = random.Random(seed + 0x9E3779B9) if extras else None
    more = random.Random(seed * 104729 + 0x51) if extras else None  # the stream ``more``
    s20 = random.Random(seed * 6700417 + 0x20) if extras and forms else None  # ``forms``
    s21 = random.Random(seed * 2147483647 + 0x21) if extras and forms and forms21 else None
    s22 = random.Random(seed * 998244353 + 0x22) if s21 is not None and forms22 else None
    s22b = random.Random(seed * 1000000007 + 0x22B) if s22 is not None else None
    s27 = random.Random(seed * 40503 + 0x27) if s22 is not None and forms27 else None
    s49 = random.Random(seed * 65537 + 0x49) if s27 is not None and forms49 else None
    if more is not None and more.random() < 0.25 and drawn and dtype != "float64":
        dtype = more.choice(HALF)  # half storage: arithmetic in float32
    gen = Generator(r, safe, random.Random(seed * 7919 + 17), extra, more, s20, s21, s22, s22b, s27, s49)
    prog = gen.program(dtype)
    data = r.choice(("unit", "nasty", "nasty", "wide", "huge")) if not safe else r.choice(("unit", "smooth"))
    calling = "plain"
    if more is not None:
        if not safe and more.random() < 0.25:
            data = "special"  # inf, NaN, signed zeros among the values
        if more.random() < 0.3:
            calling = more.choice(CALLING[1:])
    if s22 is not None and s22.random() < 0.1:
        calling = s22.choice(CALLING22)
    return replace(prog, data=data, options=draw_options(r, extra, s22), calling=calling)


# ---- shrinking ----------------------------------------------------------------------------

def shrink_candidates(prog: Program):
    """Smaller variants of ``prog``: an earlier output, a value subtree replaced by one of its
    value children or by a constant, a ``where`` condition dropped, an option set to its default."""
    for d in prog.defs:
        if d.body is not None and d.name != prog.out and d.body.ty == "v" and d.name in prog._needed():
            yield replace(prog, out=d.name, prune=True)
    for k, d in enumerate(prog.defs):
        if d.body is None or d.name not in prog._needed():
            continue
        for new in _node_variants(d.body):
            defs = list(prog.defs)
            defs[k] = replace(d, body=new)
            yield replace(prog, defs=tuple(defs), prune=True)
    for key in sorted(prog.options):
        opts = dict(prog.options)
        del opts[key]
        yield replace(prog, options=opts)


def _node_variants(node: Node):
    if node.ty == "w" and node.fmt:
        yield leaf("", "w")
    if node.ty == "v" and node.kids:
        for k in node.kids:
            if k.ty == "v":
                yield k
        yield leaf("ta.const(0.5, DT)", "v")
    for i, k in enumerate(node.kids):
        for new in _node_variants(k):
            kids = list(node.kids)
            kids[i] = new
            yield Node(node.fmt, tuple(kids), node.ty)
