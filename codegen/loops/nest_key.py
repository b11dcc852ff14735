"""A name-free key of a loop nest, so identical nests are emitted once.

:func:`nest_key` spells a nest with its buffers numbered by first use (loop variables and accumulators by
first appearance), keeping everything that reaches its LLVM function: statements and order, loop bounds,
steps and kinds, guards, expressions with dtypes and bit-exact constants, the buffers' dtypes, shapes and
strides, the accumulators' dtypes, whether it is parallel and how its rows run
(:attr:`.program.NestAttrs.row_lanes`).  Names, notes, work and owners are left out.
:class:`.llvm.emit.ModuleEmitter` emits the first nest of a key and maps the others' buffers onto its
parameters (``order``); a nest with an unknown payload or a micro-kernel's ``gemm`` has no key."""

from __future__ import annotations

from collections.abc import Callable

from tensorad.ir.expr import DataIndex, Expr
from tensorad.ir.spelling import Speller, Unkeyable

from ..program import Assign, Buffer, If, Loop, Nest, Store


class _Speller(Speller):
    """Numbers buffers, variables and expression nodes by first appearance (a variable by its range alone)."""

    def __init__(self, buffer_of: Callable[[object], Buffer]) -> None:
        super().__init__()
        self.buffer_of = buffer_of  # a READ's or Store's tensor -> its buffer
        self.buffers: dict[Buffer, int] = {}  # (buffers hash by identity)

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


__all__ = ["nest_key"]
