"""Text and HTML forms of expressions and tensors (the seed tutorial's format), deterministic: objects are
shown by name, two that share a name told apart by a ``#2``/``.1`` suffix in order of first appearance."""

from __future__ import annotations

import html
import math
import re

from . import dtype as dt
from .expr import BINARY_ARITH, COMPARISONS, Expr, Op
from .rewrite import MissingRuleError, fold, op_reads, walk, walk_along
from .tensor import ComputeOp, Tensor


def a_type(value: object) -> str:
    """``value``'s type name with its indefinite article, for messages: ``an int``, ``a float``,
    ``an Expr``."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def _named(names: dict, used: dict[str, int], x, suffixed) -> str:
    """``x``'s display name: its own name the first time that name is used, else ``suffixed(n)``
    for the ``n``-th other object of that name (in order of first appearance)."""
    name = names.get(x)
    if name is None:
        n = used.get(x.name, 0)
        used[x.name] = n + 1
        name = names[x] = x.name if n == 0 else suffixed(n)
    return name


class Namer:
    """Stable display names for variables and tensors within one printout."""

    def __init__(self) -> None:
        self._vars: dict[Expr, str] = {}
        self._tensors: dict[object, str] = {}
        self._used_var: dict[str, int] = {}
        self._used_op: dict[str, int] = {}

    def for_block(self) -> Namer:
        """A namer that shares tensor names but numbers variables afresh (one tensor's block)."""
        block = Namer()
        block._tensors, block._used_op = self._tensors, self._used_op
        return block

    def var(self, v: Expr) -> str:
        return _named(self._vars, self._used_var, v, lambda n: f"{v.name}.{n}")

    def op_name(self, op: object) -> str:
        """The display name of an operation (all its output tensors share it)."""
        return _named(self._tensors, self._used_op, op, lambda n: f"{op.name}#{n + 1}")

    def tensor(self, t: Tensor) -> str:
        name = self.op_name(t.op)
        return f"{name}.v{t.value_index}" if t.op.num_outputs > 1 else name


def _float_text(v: float, dtype: str) -> str:
    """Six decimals (``0.500000``) where they give the constant back; otherwise the shortest
    text that does (``1e-09``), so a small constant never prints as ``0.000000``."""
    text = f"{v:f}"
    if dt.round_to(float(text), dtype) == v:
        return text
    if dtype == "float32":
        import numpy as np

        return str(np.float32(v))
    return repr(v)


def const_to_str(node: Expr) -> str:
    v = node.arg
    if isinstance(v, float) and not math.isfinite(v):
        return f"{node.dtype}({v})"  # float32(-inf), float64(nan)
    if node.dtype == "float32" and not node.weak:  # (a weak constant: its Python value)
        return f"{_float_text(v, 'float32')}f"
    if node.dtype == "float64" or node.weak:
        return _float_text(v, "float64")
    if node.dtype == "bool":
        return "True" if v else "False"
    return str(v) if node.dtype == "int32" else f"{v}L"


def expr_table(namer: Namer) -> dict:
    """The printing fold table ``{Op: fn(node, *operand_texts)}``; other printers (the loop
    program's) start from it and replace the entries they print differently."""
    def binary(node, a, b):
        if node.op in (Op.POW, Op.MAXIMUM, Op.MINIMUM):
            return f"{node.op.value if node.op is not Op.POW else 'pow'}({a}, {b})"
        return f"({a} {node.op.value} {b})"

    def reduce(node, cond, *sources):
        ra = node.arg
        axes = ", ".join(namer.var(a) for a in ra.axes)
        srcs = sources[0] if len(sources) == 1 else "(" + ", ".join(sources) + ")"
        where = "" if cond == "True" else f", where={cond}"
        sel = "" if len(sources) == 1 else f"[{ra.value_index}]"
        return f"{ra.combiner.name}({srcs}, axis=[{axes}]{where}){sel}"

    table = {
        Op.VAR: lambda n: namer.var(n),
        Op.CONST: const_to_str,
        Op.NEG: lambda n, a: f"(-{a})",
        Op.NOT: lambda n, a: f"!{a}",
        Op.AND: lambda n, a, b: f"({a} && {b})",
        Op.OR: lambda n, a, b: f"({a} || {b})",
        Op.SELECT: lambda n, c, a, b: f"select({c}, {a}, {b})",
        Op.IF_THEN_ELSE: lambda n, c, a, b: f"if_then_else({c}, {a}, {b})",
        Op.CAST: lambda n, a: f"{n.dtype}({a})",
        Op.READ: lambda n, *idx: f"{namer.tensor(n.arg)}({', '.join(idx)})",
        # a gather index: the value, the extent it is brought into, and how
        Op.DATA_INDEX: lambda n, a: f"data_index({a}, {n.arg.extent}, {n.arg.mode})",
        Op.REDUCE: reduce,
    }
    for op in BINARY_ARITH | COMPARISONS:
        table[op] = binary
    for op in (Op.EXP, Op.LOG, Op.SQRT, Op.TANH, Op.SIGMOID, Op.ABS, Op.SIN, Op.COS, Op.ERF):
        table[op] = lambda n, a: f"{n.op.value}({a})"
    return table


def expr_to_str(expr: Expr, namer: Namer | None = None) -> str:
    return fold_text(expr, expr_table(namer or Namer()))


_OPEN, _CLOSE = "\ue000", "\ue001"  # private-use characters around a reference to a node's text
_REF = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_SHORT = 64  # operand texts up to this length are passed to the table as they are


def fold_text(expr: Expr, table: dict) -> str:
    """The text of ``expr`` by the printing ``table``, linear in its size: long operand texts pass as
    references expanded once at the end, and when the tree is much larger than the DAG each shared node is
    printed once as ``@k`` in a ``let @1 = ...; ... in ...`` prefix."""
    order = list(walk(expr))
    uses: dict[Expr, int] = {}
    size: dict[Expr, int] = {}
    for node in order:
        size[node] = 1 + sum(size[c] for c in node.src)
        for c in node.src:
            uses[c] = uses.get(c, 0) + 1
    share = size[expr] > 4 * len(order) + 200
    bound = [n for n in order if share and n.src and uses.get(n, 0) > 1]
    names = {n: f"@{k + 1}" for k, n in enumerate(bound)}
    templates: list[str] = []
    own: dict[Expr, str] = {}  # a bound node's own text (a reference to its template)

    def visit(node: Expr, *args: str) -> str:
        return _template(node, args, table, templates, own, names)

    body = _expand(fold(expr, visit, {}), templates)
    if not bound:
        return body
    lets = "; ".join(f"{names[n]} = {_expand(own[n], templates)}" for n in bound)
    return f"let {lets} in {body}"


def _template(node: Expr, args: tuple, table: dict, templates: list, own: dict, names: dict) -> str:
    """The text a user's rule receives for ``node``: short texts as they are, long ones and
    bound nodes as references (their templates kept in ``templates``)."""
    try:
        rule = table[node.op]
    except KeyError:
        raise MissingRuleError(f"no rule for {node.op.name} nodes ({node.op})") from None
    mine = rule(node, *args)
    if node not in names and len(mine) <= _SHORT:
        return mine
    templates.append(mine)
    ref = f"{_OPEN}{len(templates) - 1}{_CLOSE}"
    if node in names:
        own[node] = ref
        return names[node]
    return ref


def _expand(root: str, templates: list[str]) -> str:
    """Replace references by their texts, iteratively (each template is expanded where used)."""
    out: list[str] = []
    stack = [root]
    while stack:
        piece = stack.pop()
        parts = _REF.split(piece)
        if len(parts) == 1:
            out.append(piece)
            continue
        # parts: literal, ref, literal, ref, ..., literal -- push in reverse order
        stack.extend(templates[int(parts[k])] if k % 2 else parts[k] for k in range(len(parts) - 1, -1, -1))
    return "".join(out)


def _axes_str(axes, namer: Namer) -> str:
    return "(" + ", ".join(f"{namer.var(a)} : [{a.lo}, {a.hi - 1}]" for a in axes) + ")"


def _op_lines(t: Tensor, namer: Namer) -> list[str]:
    """The seed's block for one tensor: header, axes, and the body or reduction attributes."""
    op = t.op
    head = f"tensor {namer.op_name(op)}[{t.value_index}] : {t.dtype} {list(t.shape)}"
    if not isinstance(op, ComputeOp):
        return [head.replace(f"[{t.value_index}]", "[0]", 1), f"    placeholder({op.name})"]
    lines = [head]
    if op.axes:
        lines.append("axes " + _axes_str(op.axes, namer))
    body = op.body[t.value_index]
    if body.op is Op.REDUCE:
        ra = body.arg
        comb = ra.combiner
        lines += [
            "Reduction",
            f"    identity [{', '.join(expr_to_str(e, namer) for e in comb.identity)}]",
            f"    lhs [{', '.join(namer.var(v) for v in comb.lhs)}]  "
            f"rhs [{', '.join(namer.var(v) for v in comb.rhs)}]",
            f"    combiner [{', '.join(expr_to_str(e, namer) for e in comb.result)}]",
            f"    axes {_axes_str(ra.axes, namer)}",
            f"    condition {expr_to_str(body.src[0], namer)}",
        ]
        lines += [f"    source[{i}] = {expr_to_str(s, namer)}" for i, s in enumerate(body.src[1:])]
        if comb.arity > 1:
            lines.append(f"    value_index {ra.value_index}")
    else:
        lines.append("    " + expr_to_str(body, namer))
    return lines


def print_tensor_recursively(tensor: Tensor, namer: Namer | None = None) -> str:
    """``ta.PrintTensorRecursively``: the tensor, then every tensor it reads, consumers first.  ``namer``:
    a :class:`Namer` shared with other printouts (``tensorad show``): a name means one tensor in all."""
    namer = Namer() if namer is None else namer
    # the tensor, then the tensors it reads in order of appearance, depth-first (pre-order)
    order = walk_along(tensor, lambda t: op_reads(t.op)[::-1] if isinstance(t.op, ComputeOp) else ())
    blocks = [_op_lines(t, namer.for_block()) for t in order]
    return "\n\n".join("\n".join(b) for b in blocks) + "\n"


def tensor_to_str(tensor: Tensor) -> str:
    """``str(tensor)``: the one-tensor block (what it computes, not its producers)."""
    return "\n".join(_op_lines(tensor, Namer()))


def tensor_to_html(tensor: Tensor) -> str:
    """Jupyter display: the recursive printout with tensor headers emphasised."""
    parts = []
    for block in print_tensor_recursively(tensor).rstrip("\n").split("\n\n"):
        head, *rest = block.split("\n")
        parts.append(f"<b>{html.escape(head)}</b>\n" + html.escape("\n".join(rest)))
    style = "line-height:1.3; white-space:pre-wrap; overflow-wrap:anywhere; max-width:100%"
    return (f"<pre style='{style}'>" + "\n\n".join(parts) + "</pre>")
