"""Linear forms of integer index expressions: ``c0 + sum(c_k * atom_k)``, exact Python ints.

The one module that takes index expressions apart: ``+``, ``-`` and products by a constant make a linear
form over *atoms* (variables, reads, ``//``/``%``, casts, anything not linear).  Its readers: the
simplifier's normal form (:func:`from_linear` orders atoms by :func:`atom_key`, so ``i + j`` and ``j + i``
become one node), the isl boundary, stride analysis (:func:`var_coefficients`) and :func:`solve_for`.

A float constant or float arithmetic is an atom.  :func:`to_linear` turns isl's ``m*x - m*c*(x // c)``
back into ``m * (x % c)`` (and ``m*c*(x // c) + m*(x % c)`` into ``m*x``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..ir import dtype as dt
from ..ir.expr import Expr, Op, const
from ..ir.intrange import cast_keeps_value
from ..ir.rewrite import fold_along, walk


def atom_key(e: Expr, memo: dict | None = None) -> tuple:
    """A deterministic sort key for atoms: variables first (by name, then creation order), then other
    atoms by structure (never a tensor's name or an address).  ``memo`` (node -> key, shared by a caller
    that sorts many atoms) builds each subtree's key once, so equal subtrees share one key object."""
    if e.op is Op.VAR:
        return (0, e.name, e.arg.uid)
    return (1, _structure(e, {} if memo is None else memo))


def tensor_id(t) -> tuple:
    """A placeholder's uid or a compute op's provenance group: identity without the name."""
    op = t.op
    return ("p", op.uid) if hasattr(op, "uid") else ("c", op.provenance.group)


def _structure(e: Expr, memo: dict) -> tuple:
    found = memo.get(e)
    if found is None:
        if e.op is Op.VAR:
            found = ("var", e.name, e.arg.uid)
        elif e.op is Op.CONST:
            found = ("const", e.dtype, repr(e.arg))
        else:
            arg = e.arg
            extra = (repr(arg.shape), arg.value_index, tensor_id(arg)) if e.op is Op.READ else ()
            found = (e.op.value, e.dtype, *extra, *(_structure(s, memo) for s in e.src))
        memo[e] = found
    return found


def _sorted_terms(items: list[tuple[Expr, int]]) -> list[tuple[Expr, int]]:
    """``items`` sorted by :func:`atom_key` of their atoms; the structural keys of atoms that are not
    variables are built only when two or more of them are."""
    variables = [t for t in items if t[0].op is Op.VAR]
    others = len(items) - len(variables)
    if others > 1:
        return sorted(items, key=lambda t: atom_key(t[0]))
    variables.sort(key=lambda t: (t[0].arg.name, t[0].arg.uid))
    return variables + [t for t in items if t[0].op is not Op.VAR] if others else variables


@dataclass(frozen=True)
class Linear:
    """``const + sum(coef * atom)``; ``terms`` is sorted by :func:`atom_key`, no zero coefficients."""

    terms: tuple[tuple[Expr, int], ...]
    const: int

    @staticmethod
    def of(terms: dict[Expr, int], c: int) -> Linear:
        items = [(a, k) for a, k in terms.items() if k]
        if len(items) > 1:  # (structural keys cost: most forms have one atom)
            items = _sorted_terms(items)
        return Linear(tuple(items), int(c))

    def as_dict(self) -> dict[Expr, int]:
        return dict(self.terms)

    def __add__(self, other: Linear) -> Linear:
        if not other.terms or not self.terms:  # a constant shifts the other form: order kept
            return Linear(self.terms or other.terms, self.const + other.const)
        d = self.as_dict()
        for a, k in other.terms:
            d[a] = d.get(a, 0) + k
        return Linear.of(d, self.const + other.const)

    def scale(self, s: int) -> Linear:
        return Linear((), 0) if not s else Linear(tuple((a, k * s) for a, k in self.terms), self.const * s)

    def __sub__(self, other: Linear) -> Linear:
        return self + other.scale(-1)

    @property
    def is_const(self) -> bool:
        return not self.terms


def is_index(e: Expr) -> bool:
    return dt.is_int(e.dtype)


def int_constant(e: Expr) -> int | None:
    """The value of an integer constant node (exact), else ``None`` -- also for a float
    constant with an integral value: float arithmetic is never index arithmetic."""
    if e.op is not Op.CONST or not is_index(e):
        return None
    a = e.arg
    return int(a) if isinstance(a, int) or float(a).is_integer() else None


_LINEAR_OPS = frozenset((Op.ADD, Op.SUB, Op.MUL, Op.NEG))


def _operands(e: Expr) -> tuple[Expr, ...]:
    """The operands whose forms the form of ``e`` is made of (none: ``e`` is an atom or a constant)."""
    return e.src if e.op in _LINEAR_OPS and dt.is_int(e.dtype) else ()


def _combine(e: Expr, memo: dict) -> Linear:
    """The form of ``e`` from the forms of its operands (already in ``memo``)."""
    op = e.op
    if not is_index(e):
        return Linear(((e, 1),), 0)  # not integer arithmetic: an atom (never int() of 0.3)
    if op is Op.CONST:
        c = int_constant(e)
        return Linear(((e, 1),), 0) if c is None else Linear((), c)
    if op is Op.ADD:
        return _fold_mod(memo[e.src[0]] + memo[e.src[1]], memo)
    if op is Op.SUB:
        return _fold_mod(memo[e.src[0]] - memo[e.src[1]], memo)
    if op is Op.NEG:
        return memo[e.src[0]].scale(-1)
    if op is Op.MUL:
        a, b = memo[e.src[0]], memo[e.src[1]]
        if a.is_const:
            return b.scale(a.const)
        if b.is_const:
            return a.scale(b.const)
    return Linear(((e, 1),), 0)


def to_linear(e: Expr, memo: dict | None = None) -> Linear:
    """The linear form of integer expression ``e`` (atoms: its non-linear subterms); ``memo``: node->form."""
    if memo is None:
        memo = {}
    found = memo.get(e)
    if found is not None:
        return found
    if not _operands(e):  # an atom or a constant
        found = memo[e] = _combine(e, memo)
        return found
    return fold_along(e, _operands, lambda n: _combine(n, memo), memo)


def _fold_mod(f: Linear, memo: dict) -> Linear:
    """``m*x - m*c*(x // c)`` -> ``m*(x % c)``, and ``m*c*(x // c) + m*(x % c)`` -> ``m*x`` (floored)."""
    d = f.as_dict()
    for atom, k in f.terms:
        if atom.op is not Op.FLOORDIV or atom.src[1].op is not Op.CONST:
            continue
        c = int(atom.src[1].arg)
        mod = Expr(Op.MOD, atom.dtype, atom.src)
        if c > 0 and k % c == 0 and d.get(mod, 0) * c == k:
            whole = to_linear(atom.src[0], memo).scale(k // c)
            return _fold_mod(f - Linear.of({atom: k, mod: k // c}, 0) + whole, memo)
    for atom, k in f.terms:
        if atom.op is not Op.FLOORDIV or atom.src[1].op is not Op.CONST:
            continue
        c = int(atom.src[1].arg)
        if c <= 0 or k % c:
            continue
        m = -k // c
        x = to_linear(atom.src[0], memo).scale(m)
        rest = f - x - Linear(((atom, k),), 0)
        # the fold applies when every atom of m*x is present with its coefficient
        if all(d.get(a, 0) == kx for a, kx in x.terms):
            mod = Expr(Op.MOD, atom.dtype, atom.src)
            return rest + Linear(((mod, m),), 0)
    return f


def from_linear(f: Linear, dtype: str = dt.INDEX) -> Expr:
    """Rebuild ``f`` as ``t1 +/- t2 ... +/- c`` in atom-key order (a fixed point of to_linear)."""
    acc: Expr | None = None
    c = f.const
    if f.terms and f.terms[0][1] < 0 and c > 0:  # 9 - i rather than -i + 9
        acc, c = const(c, dtype), 0
    for atom, k in f.terms:
        mag = abs(k)
        term = atom if mag == 1 else Expr(Op.MUL, dtype, (const(mag, dtype), atom))
        if acc is None:
            acc = term if k > 0 else (Expr(Op.NEG, dtype, (atom,)) if mag == 1
                                      else Expr(Op.MUL, dtype, (const(k, dtype), atom)))
        else:
            acc = Expr(Op.ADD if k > 0 else Op.SUB, dtype, (acc, term))
    if acc is None:
        return const(c, dtype)
    if c:
        acc = Expr(Op.ADD if c > 0 else Op.SUB, dtype, (acc, const(abs(c), dtype)))
    return acc


def solve_for(f: Linear, v: Expr) -> Linear | None:
    """``g`` such that ``f == 0`` exactly when ``v == g``: when ``v``'s coefficient is 1 or -1
    and no other atom mentions ``v`` (``q // 3 - a + 2*y == 0`` gives ``a == 2*y + q // 3``);
    else ``None``.  Integer solutions only: no division."""
    k = 0
    for atom, c in f.terms:
        if atom is v:
            k = c
    if k not in (1, -1):
        return None
    rest = Linear(tuple((a, c) for a, c in f.terms if a is not v), f.const)
    if any(n is v for a, _ in rest.terms for n in walk(a)):
        return None
    return rest.scale(-k)  # k*v + rest == 0  <=>  v == -k*rest (k = +-1)


def int_cast_operand(atom: Expr) -> Expr | None:
    """The operand of a cast between integer types that keeps its value
    (:func:`tensorad.ir.intrange.cast_keeps_value`), else ``None``: a cast that may wrap stays an atom."""
    if atom.op is Op.CAST and is_index(atom) and is_index(atom.src[0]) and cast_keeps_value(atom):
        return atom.src[0]
    return None


def var_coefficients(e: Expr) -> dict[Expr | None, int] | None:
    """``e`` as ``sum c_v * v + c`` -- ``{v: c_v, None: c}`` -- when every atom of its form is
    a variable (through casts between integer types); ``None`` when it is not linear in its
    variables (a division, a read, float arithmetic).  What stride and access analyses ask."""
    f = to_linear(e)
    out: dict[Expr | None, int] = {None: f.const} if f.const else {}
    for atom, k in f.terms:
        if atom.op is Op.VAR:
            out[atom] = out.get(atom, 0) + k
            continue
        inner = int_cast_operand(atom)
        sub = None if inner is None else var_coefficients(inner)
        if sub is None:
            return None
        for v, c in sub.items():
            out[v] = out.get(v, 0) + k * c
    return out
