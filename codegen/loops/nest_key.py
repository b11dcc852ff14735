"""A name-free key of a loop nest, so identical nests are emitted once.

:func:`nest_key` spells a nest with its buffers numbered by first use (loop variables and accumulators by
first appearance), keeping everything that reaches its LLVM function: statements and order, loops, guards,
expressions with dtypes and bit-exact constants, the buffers' dtypes, shapes and strides, the accumulators'
dtypes, whether it is parallel and how its rows run (:attr:`.program.NestAttrs.row_lanes`). Names, notes, work
and owners are left out, and so is how index arithmetic is spelled: an integer sum is keyed by its linear form
(``X[(-2 + y) + 1]`` and ``X[(0 + y) - 1]`` share one function). :func:`shifted` first moves a nest's accesses
back along each buffer's leading axis by the constant of its first access there, so the steps of an unrolled
recurrence (step ``t`` reading ``S[t, ...]``) have one key. :class:`.llvm.emit.ModuleEmitter` emits the first
nest of a key and maps the others' buffers onto its parameters (``order``), each pointer advanced by its
nest's offset; a nest with an unknown payload or a micro-kernel's ``gemm`` has no key."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tensorad.ir import dtype as dt
from tensorad.ir.expr import DataIndex, Expr, Op, const
from tensorad.ir.rewrite import fold_along, operands, walk
from tensorad.ir.spelling import Speller, Unkeyable, hashable
from tensorad.poly.linear import Linear, to_linear

from ..program import Assign, Buffer, If, Loop, Nest, Store, map_stmt, stmt_exprs, walk_stmts

_LINEAR = frozenset((Op.ADD, Op.SUB, Op.MUL, Op.NEG))
# the operations a term ordered by its structure is made of
_TERMS = _LINEAR | frozenset((Op.FLOORDIV, Op.MOD, Op.MINIMUM, Op.MAXIMUM, Op.CAST))


class _Speller(Speller):
    """Numbers buffers, variables and expression nodes by first appearance (a variable by its range alone)."""

    def __init__(self, buffer_of: Callable[[object], Buffer]) -> None:
        super().__init__()
        self.buffer_of = buffer_of  # a READ's or Store's tensor -> its buffer
        self.buffers: dict[Buffer, int] = {}  # (buffers hash by identity)
        self.canon: dict[Expr, Expr] = {}  # a node -> its index arithmetic in canonical form
        self.forms: dict = {}  # (to_linear's memo)
        self.orders: dict[Expr, tuple] = {}  # a canonical term -> where it goes in a sum

    def expr(self, root: Expr) -> int:
        return super().expr(fold_along(root, self._parts, self._canonical, self.canon))

    def _form(self, e: Expr) -> Linear | None:
        """The linear form of an integer sum of terms (not of a product of two variables: an atom)."""
        if e.op not in _LINEAR or not dt.is_int(e.dtype):
            return None
        f = to_linear(e, self.forms)
        return None if len(f.terms) == 1 and f.terms[0][0] is e else f

    def _parts(self, e: Expr) -> tuple:
        f = self._form(e)
        return e.src if f is None else tuple(a for a, _ in f.terms)

    def _canonical(self, e: Expr) -> Expr:
        """``e`` over canonical operands; an integer sum of terms rebuilt from its linear form."""
        f = self._form(e)
        if f is not None:
            terms = sorted(((self.canon[a], k) for a, k in f.terms), key=lambda t: self._order(t[0]))
            out = None
            for atom, k in terms:
                term = atom if k == 1 else Expr(Op.MUL, e.dtype, (const(k, e.dtype), atom))
                out = term if out is None else Expr(Op.ADD, e.dtype, (out, term))
            c = const(f.const, e.dtype)
            return c if out is None else Expr(Op.ADD, e.dtype, (out, c)) if f.const else out
        src = tuple(self.canon[s] for s in e.src)
        return e if all(a is b for a, b in zip(src, e.src)) else e.replace(src=src)

    def _order(self, e: Expr) -> tuple:
        """A term's place in a canonical sum: a numbered variable by its number, then a term over numbered
        variables and constants by its structure (spelled as text: any two compare); any other term after
        those, in the order it came."""
        found = self.orders.get(e)
        if found is None:
            if e.op is Op.VAR:
                n = self.vars.get(e)
                found = (2,) if n is None else (0, n)
            elif e.op is Op.CONST:
                found = (1, repr(("c", e.dtype, hashable(e.arg))))
            elif e.op in _TERMS:
                parts = [self._order(s) for s in e.src]
                found = (2,) if any(p[0] == 2 for p in parts) else (1, repr((e.op.name, e.dtype, parts)))
            else:
                found = (2,)
            self.orders[e] = found
        return found

    def buffer(self, t: object) -> int:
        return self.buffers.setdefault(self.buffer_of(t), len(self.buffers))

    def read(self, e: Expr) -> object:
        return ("r", self.buffer(e.arg), e.arg.dtype)

    def other(self, e: Expr) -> object:
        arg = e.arg
        if isinstance(arg, DataIndex):
            return ("d", arg.extent, arg.mode, arg.tensor, arg.axis)
        if arg is None:
            return None
        raise Unkeyable(f"{e.op.name} payload {arg!r}")

    def stmts(self, stmts: tuple) -> tuple:
        out = []
        for s in stmts:
            if isinstance(s, Loop):
                out.append(("L", self.expr(s.var), self.expr(s.lo), self.expr(s.hi), s.step, s.kind,
                            s.dim, self.stmts(s.body)))
            elif isinstance(s, If):
                out.append(("I", self.expr(s.cond), s.affine, self.stmts(s.then), self.stmts(s.orelse)))
            elif isinstance(s, Store):
                out.append(("S", self.buffer(s.buffer.tensor), s.buffer.tensor.dtype,
                            tuple(self.expr(i) for i in s.index), self.expr(s.value)))
            elif isinstance(s, Assign):
                out.append(("A", tuple(self.expr(t) for t in s.targets),
                            tuple(self.expr(v) for v in s.values), s.combiner))
            else:
                raise Unkeyable(f"statement {type(s).__name__}")
        return tuple(out)


def nest_key(nest: Nest, buffer_of: Callable[[object], Buffer]) -> tuple[tuple, list[Buffer]] | None:
    """``(key, order)``: the nest's name-free key and its buffers in the key's order (``buffer_of``: a
    tensor's buffer); ``None`` for a nest the key cannot spell."""
    if nest.attrs.gemm is not None:
        return None
    sp = _Speller(buffer_of)
    try:
        accs = tuple((sp.expr(a), a.dtype) for a in nest.accumulators)
        body = sp.stmts(nest.body)
    except Unkeyable:
        return None
    order = list(sp.buffers)
    buffers = tuple((b.dtype, tuple(b.shape), b.strides) for b in order)
    return (nest.parallel, nest.attrs.row_lanes, accs, body, tuple(sp.lines), buffers), order


def shifted(nest: Nest, buffer_of: Callable[[object], Buffer]) -> tuple[Nest, dict[Buffer, int]]:
    """``nest`` with every access of each buffer moved back along its leading axis by the constant part
    of the buffer's first access there, and those constants by buffer (``buffer_of``: a tensor's buffer;
    none where all are zero).  The nest run on pointers advanced by them (``constant * leading stride``
    elements) computes what ``nest`` does: the steps of an unrolled recurrence, each reading its step's
    slice ``S[t, ...]`` of a stacked tensor, become one nest reading ``S[0, ...]``, one key and one
    function.  Only the leading axis moves: the other axes' indices, whose ranges a nest's rows and runs
    are built on, are kept."""
    firsts: dict[Buffer, int] = {}
    forms: dict = {}

    def first(t: object, index: tuple) -> None:
        b = buffer_of(t)
        if b not in firsts:
            lead = index[0] if index else None
            firsts[b] = to_linear(lead, forms).const if lead is not None and dt.is_int(lead.dtype) else 0

    for st in walk_stmts(nest.body):
        if isinstance(st, Store):
            first(st.buffer.tensor, st.index)
        for e in stmt_exprs(st):
            for n in walk(e):
                if n.op is Op.READ:
                    first(n.arg, n.src)
    bases = {b: c for b, c in firsts.items() if c}
    if not bases:
        return nest, {}

    def moved(t: object, index: tuple) -> tuple:
        c = bases.get(buffer_of(t))
        if not c:
            return index
        return (Expr(Op.ADD, index[0].dtype, (index[0], const(-c, index[0].dtype))), *index[1:])

    memo: dict[Expr, Expr] = {}

    def rebuilt(node: Expr) -> Expr:
        new = tuple(memo[x] for x in node.src)
        if node.op is Op.READ:
            new = moved(node.arg, new)
        return node.replace(src=new) if any(a is not b for a, b in zip(new, node.src)) else node

    def leaf(st):
        return replace(st, index=moved(st.buffer.tensor, st.index)) if isinstance(st, Store) else st

    body = tuple(map_stmt(st, lambda e: fold_along(e, operands, rebuilt, memo), leaf) for st in nest.body)
    return Nest(nest.name, body, nest.outputs, nest.work, nest.note, nest.parallel, nest.accumulators,
                nest.attrs, nest.temps), bases  # (a plain nest: a renamed one's body is made here)
