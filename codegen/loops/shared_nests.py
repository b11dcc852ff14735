"""Groups lowered once per name-free key, the others renamed (a long chain's lowering).

:class:`SharedLowering` lowers each distinct group once per ``lower`` call and renames its steps for every
group with the same key, :func:`group_key`: everything lowering reads from a group, numbered by first use,
names left out but variables' (a shared nest keeps the first group's loop variables).  A group the key
cannot spell (a matrix product, a scatter, split axes, strips, an unknown payload), or whose steps hold
something the renaming would miss, is lowered on its own.  Names reach a lowered nest only in its name and
note, as :func:`marked` names that :meth:`SharedLowering.steps` replaces; a renaming mapping one name to two
lowers the group afresh."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from tensorad.ir.expr import Expr, Op
from tensorad.ir.rewrite import operands, walk_along
from tensorad.ir.spelling import Speller, Unkeyable, hashable, renamed
from tensorad.ir.tensor import ComputeOp, Tensor

from ..program import Assign, Buffer, Fill, If, Loop, Nest, NestAttrs, Store, map_stmt, stmt_exprs, walk_stmts
from ..strategies.registry import EpilogueStep, PointwiseNest, ReductionNest, ScanNest, kept_outs

_OPEN, _CLOSE = "\ue000", "\ue001"
_MARKED = re.compile(f"{_OPEN}([^{_OPEN}{_CLOSE}]*){_CLOSE}")


def marked(name: str) -> str:
    """``name`` as a lowering pass writes it into a nest's name or note (see the docstring)."""
    return f"{_OPEN}{name}{_CLOSE}"


def unmarked(text: str, names: dict[str, str] | None = None) -> str:
    """``text`` with its marked names replaced by ``names[name]`` (default: the name itself)."""
    if _OPEN not in text:
        return text
    return _MARKED.sub(lambda m: (names or {}).get(m.group(1), m.group(1)), text)


class _Speller(Speller):
    """Numbers tensors, ops, buffers, variables (named: a shared nest keeps the first group's) and nodes."""

    def __init__(self, buffer_of: Callable[[Tensor], Buffer | None]) -> None:
        super().__init__(named=True)
        self.buffer_of = buffer_of
        self.tensors: dict[Tensor, int] = {}
        self.tensor_buffers: dict[Tensor, Buffer | None] = {}
        self.ops: dict[object, int] = {}
        self.buffers: dict[Buffer, int] = {}  # (buffers hash by identity)

    def tensor(self, t: Tensor) -> int:
        n = self.tensors.get(t)
        if n is None:
            op = self.op(t.op)
            n = self.tensors[t] = len(self.tensors)
            b = self.tensor_buffers[t] = self.buffer_of(t)
            buf = self.buffer(b)
            self.lines.append(("T", op, t.value_index, tuple(t.shape), t.dtype, buf))
        return n

    def op(self, op: object) -> int:
        n = self.ops.get(op)
        if n is None:
            n = self.ops[op] = len(self.ops)
            if isinstance(op, ComputeOp):
                self.lines.append(("C", hashable(op.tag), hashable(op.attrs), op.provenance.role,
                                   op.num_outputs, tuple(self.var(a) for a in op.axes), op.is_reduction,
                                   tuple(self.var(a) for a in op.reduce_axes)))
            else:
                self.lines.append(("P", type(op).__name__))
        return n

    def buffer(self, b: Buffer | None) -> int | None:
        if b is None:
            return None
        n = self.buffers.get(b)
        if n is None:
            n = self.buffers[b] = len(self.buffers)
            self.lines.append(("B", b.kind, tuple(b.shape), b.dtype, self.tensor(b.tensor)))
        return n

    def read(self, e: Expr) -> object:
        return ("r", self.tensor(e.arg))


def group_key(g, bodies: dict, outs_of: Callable, scalar: set,
              buffer_of: Callable[[Tensor], Buffer | None]) -> tuple[tuple, _Speller] | None:
    """``(key, speller)`` of a group (:class:`.loops.nest_groups.Group`) as :func:`.lower._lower_one_group`
    lowers it, or ``None`` when it has none (see the module docstring)."""
    if g.strips or g.columns:
        return None
    sp = _Speller(buffer_of)
    units = []
    try:
        for u, tau in zip(g.units, g.taus):
            p, core = u.plan, u.plan.core
            if not isinstance(core, (ReductionNest, ScanNest)) \
                    and not (isinstance(p, PointwiseNest) and p.split is None):
                return None  # (a product, scatter-adds, digits: not keyed)
            e = p.epilogue if isinstance(p, EpilogueStep) else None
            units.append((
                sp.op(u.op), tuple(sp.expr(b) for b in p.bodies), tuple(sp.expr(b) for b in bodies[u.op]),
                tuple(sp.var(a) for a in u.outer),
                tuple((sp.var(a), sp.expr(v)) for a, v in u.tau_of.items()),
                tuple(sp.expr(x) for x in tau),
                None if e is None else (sp.op(core.op), tuple(sp.expr(b) for b in bodies[core.op])),
                None if e is None else (sp.op(e.consumer), sp.tensor(e.reduction), sp.expr(e.body)),
                type(p), isinstance(core, ReductionNest) and core.strips, u.op in scalar,
                tuple(sp.buffer(b) for b in [*outs_of(u.op), *kept_outs(p, outs_of)])))
    except Unkeyable:
        return None
    return (g.depth, tuple(units), tuple(sp.lines)), sp


class _Entry:
    """A group's steps as lowered (names marked) and what renaming them needs."""

    def __init__(self, steps: list | None, sp: _Speller) -> None:
        self.steps = steps
        self.tensors = list(sp.tensors)
        self.tensor_buffers = {t: b for t, b in sp.tensor_buffers.items() if b is not None}
        self.ops = list(sp.ops)
        self.buffers = list(sp.buffers)
        self.names = {m for st in steps or () if isinstance(st, Nest) for text in (st.name, st.note)
                      for m in _MARKED.findall(text)}
        known = {o.name for o in sp.ops} | {b.name for b in sp.buffers}
        self.shareable = steps is None or _renamable(steps, set(sp.tensors), set(sp.ops),
                                                     {id(b) for b in sp.buffers}, self.names, known)


class SharedLowering:
    """One ``lower`` call's lowered groups by :func:`group_key`; ``lowered``, ``renamed``: counts of each."""

    def __init__(self) -> None:
        self.table: dict[tuple, _Entry] = {}
        self.lowered = 0
        self.renamed = 0

    def steps(self, g, bodies: dict, outs_of: Callable, scalar: set,
              buffer_of: Callable[[Tensor], Buffer | None], lower: Callable[[], list | None]) -> list | None:
        """The steps of group ``g``: ``lower()``'s (names unmarked), or an equal group's renamed."""
        keyed = group_key(g, bodies, outs_of, scalar, buffer_of)
        entry = None if keyed is None else self.table.get(keyed[0])
        if entry is not None and entry.shareable:
            if entry.steps is None:
                return None  # (an equal group cannot be fused exactly: neither can this one)
            made = _renamed(entry, keyed[1])
            if made is not None:
                self.renamed += 1
                return made
        self.lowered += 1
        made = lower()
        if keyed is not None and entry is None:
            self.table[keyed[0]] = _Entry(made, keyed[1])
        return None if made is None else [_finished(st, {}) for st in made]


def _finished(step, names: dict[str, str]):
    if isinstance(step, Nest) and (_OPEN in step.name or _OPEN in step.note):
        return replace(step, name=unmarked(step.name, names), note=unmarked(step.note, names))
    return step


def _renamable(steps: list, tensors: set, ops: set, buffers: set, names: set, known: set) -> bool:
    """Whether renaming ``steps`` through the key's numbering reaches everything in them that
    names a tensor, op or buffer (else the group is lowered afresh each time)."""
    if not names <= known:
        return False
    seen: set = set()
    for st in steps:
        if isinstance(st, Fill):
            if id(st.buffer) not in buffers or not _reads_within(st.value, tensors, seen):
                return False
            continue
        if not isinstance(st, Nest) or any(id(b) not in buffers for b in st.outputs) \
                or st.attrs.gemm is not None:
            return False
        for s in walk_stmts(st.body):
            if not isinstance(s, (Loop, If, Store, Assign)):
                return False
            if isinstance(s, (Store, Assign)) and s.owner is not None and s.owner not in ops:
                return False
            if isinstance(s, Store) and id(s.buffer) not in buffers:
                return False
            if not all(_reads_within(e, tensors, seen) for e in stmt_exprs(s)):
                return False
    return True


def _reads_within(root: Expr, tensors: set, seen: set) -> bool:
    """Whether every tensor ``root`` names (a read, any payload) is among ``tensors`` (``seen``: checked)."""
    return all(n.arg in tensors if n.op is Op.READ else
               n.op is Op.VAR or n.op is Op.CONST or n.arg is None or isinstance(n.arg, str)
               for n in walk_along(root, operands, seen))


class RenamedNest(Nest):
    """A nest made by renaming ``source`` (a lowered nest with the same key), its body renamed when first
    read: a build reads only ``source``'s (:meth:`buffer` maps the buffers), a printout this one's."""

    def __init__(self, name: str, body: tuple | None, outputs: tuple, work: int = 0, note: str = "",
                 parallel: bool = False, accumulators: tuple = (), attrs: NestAttrs | None = None, *,
                 source: Nest | None = None, rename: Callable[[tuple], tuple] | None = None,
                 buffers: dict[int, Buffer] | None = None, source_buffers: dict | None = None) -> None:
        self._rename = rename
        super().__init__(name, body, outputs, work, note, parallel, accumulators,
                         NestAttrs() if attrs is None else attrs)
        self.source = source
        self._buffers = buffers or {}
        self._source_buffers = source_buffers or {}  # the source's tensors -> their buffers

    @property  # type: ignore[override]
    def body(self) -> tuple:
        made = self.__dict__.get("_body")
        if made is None:
            made = self.__dict__["_body"] = self._rename(self.source.body)
        return made

    @body.setter
    def body(self, value: tuple | None) -> None:
        self.__dict__["_body"] = value

    @property
    def made(self) -> bool:
        """Whether the body has been renamed yet."""
        return self.__dict__.get("_body") is not None

    def buffer(self, b: Buffer) -> Buffer:
        """This nest's buffer in place of ``source``'s ``b``."""
        return self._buffers[id(b)]

    def source_buffer(self, t: Tensor) -> Buffer:
        """The buffer ``source`` was lowered with for its tensor ``t`` (``KeyError``: none)."""
        return self._source_buffers[t]


def _renamed(entry: _Entry, sp: _Speller) -> list | None:
    """``entry``'s steps for the group ``sp`` spelled, or ``None`` when one name would map to two."""
    new_tensors, new_ops, new_buffers = list(sp.tensors), list(sp.ops), list(sp.buffers)
    names: dict[str, str] = {}
    for old, new in [*zip(entry.ops, new_ops), *zip(entry.buffers, new_buffers)]:
        if old.name in entry.names and names.setdefault(old.name, new.name) != new.name:
            return None
    tmap = dict(zip(entry.tensors, new_tensors))
    omap = dict(zip(entry.ops, new_ops))
    bmap = {id(o): n for o, n in zip(entry.buffers, new_buffers)}
    memo: dict[Expr, Expr] = {}

    def ren(e: Expr) -> Expr:
        return renamed(e, tmap, memo)

    def leaf(s: Store | Assign) -> Store | Assign:
        if isinstance(s, Store):
            return replace(s, buffer=bmap[id(s.buffer)], owner=omap.get(s.owner, s.owner))
        return replace(s, owner=omap.get(s.owner, s.owner))

    def stmts(body: tuple) -> tuple:
        return tuple(map_stmt(s, ren, leaf) for s in body)

    out = []
    for st in entry.steps:
        if isinstance(st, Fill):
            out.append(Fill(bmap[id(st.buffer)], ren(st.value), st.parallel))
        else:
            out.append(RenamedNest(unmarked(st.name, names), None, tuple(bmap[id(b)] for b in st.outputs),
                                   st.work, unmarked(st.note, names), st.parallel, st.accumulators,
                                   st.attrs, source=st, rename=stmts, buffers=bmap,
                                   source_buffers=entry.tensor_buffers))
    return out
