"""The loop program that ``lower`` produces and ``build`` compiles: buffers, nests, statements.

A :class:`Program` is a list of steps run in order, each a :class:`Fill` (a whole buffer set to one value) or
a :class:`Nest` (the loops of one materialized tensor) of immutable statements: :class:`Loop` (exact bounds
over enclosing loop variables), :class:`If` (``affine`` guards from isl, else data tests), :class:`Store` and
:class:`Assign` (accumulators assigned simultaneously).  ``counted=False`` marks bookkeeping, which runs but
is not work; ``owner`` names the member op of a fused nest a statement counts for.  Expressions are IR nodes:
``READ``s name the buffer's tensor, loop variables are index ``VAR``s, accumulators value ``VAR``s."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from tensorad.ir.expr import Expr, Op
from tensorad.ir.printer import Namer, expr_table, fold_text
from tensorad.ir.rewrite import operands, walk_along
from tensorad.ir.tensor import Tensor


@dataclass(frozen=True, eq=False)
class Buffer:
    """Storage of one tensor: row-major, contiguous, ``kind`` is input/output/temp."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    kind: str
    tensor: Tensor

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return 1 if self.dtype == "bool" else int(self.dtype[-2:]) // 8

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(math.prod(self.shape[d + 1:]) for d in range(len(self.shape)))


@dataclass(frozen=True, eq=False)
class Loop:
    var: Expr
    lo: Expr
    hi: Expr
    body: tuple
    step: int = 1
    kind: str = "serial"  # serial | parallel
    dim: int = -1  # the schedule's time dimension this loop scans


@dataclass(frozen=True, eq=False)
class If:
    cond: Expr
    then: tuple
    orelse: tuple = ()
    affine: bool = True


@dataclass(frozen=True, eq=False)
class Store:
    buffer: Buffer
    index: tuple[Expr, ...]
    value: Expr
    counted: bool = True  # False: per-element bookkeeping (accumulator init, fused epilogue)
    owner: object = None  # the op of a fused nest's member that runs it (work counts per owner)


@dataclass(frozen=True, eq=False)
class Assign:
    targets: tuple[Expr, ...]
    values: tuple[Expr, ...]
    counted: bool = True  # False: accumulator initialisation (bookkeeping, not work)
    owner: object = None  # as Store's
    #: the update's combiner when it is order-free (:attr:`CommReducer.order_free`): its loop's terms
    #: may be combined in lanes (:mod:`.llvm.lanes`)
    combiner: object = None


@dataclass(frozen=True, eq=False)
class Fill:
    """``buffer[...] = value`` everywhere (a memset for zero); not counted as work.
    ``parallel``: split among the threads of a parallel build (:mod:`.loops.fills`)."""

    buffer: Buffer
    value: Expr
    parallel: bool = False


@dataclass(frozen=True)
class NestAttrs:
    """What scheduling decided about a nest beyond its loops, read by the passes after it and by emission:
    ``note`` (joined into the nest's note); ``parallel_dim``, the time dimension a parallel outermost loop
    must scan (-1: none may); ``range``, ``(lo, hi, step)`` of the outermost loop shared among threads
    (``None``: not shared; a micro-kernel call's ``(0, blocks, 1)``); ``grain``, the trips a thread's share is
    a multiple of (:mod:`.strategies.scatter`); ``row_lanes``, ``(lanes, loops)`` of a scan's rows
    (:func:`.strategies.scan.row_lanes`: 1, rolled and scalar, else vectorized at that width; ``None``: not
    such a scan); ``gemm``, the micro-kernel call the nest runs (``None``: plain loops); ``first_block``, a
    generic kernel's block runs the nest where the flag after its count of rows (its last input's second
    element) is set, its part's first block of a call (:mod:`.passes.row_bound`)."""

    note: str = ""
    parallel_dim: int = -1
    range: tuple[int, int, int] | None = None
    grain: int = 1
    row_lanes: tuple[int, int] | None = None
    gemm: object = None
    first_block: bool = False


@dataclass(eq=False)
class Nest:
    """The loops computing one materialized op; ``parallel`` marks a parallel outermost loop."""

    name: str
    body: tuple
    outputs: tuple[Buffer, ...]
    work: int = 0
    note: str = ""
    parallel: bool = False
    accumulators: tuple[Expr, ...] = ()
    attrs: NestAttrs = NestAttrs()
    temps: tuple[Buffer, ...] = ()  # temporaries of this nest's own (a fused pass's partial columns)


Step = Fill | Nest


@dataclass(eq=False)
class Program:
    name: str
    inputs: list[Buffer]
    outputs: list[Buffer]
    temps: list[Buffer]
    steps: list[Step]
    buffers: dict[Tensor, Buffer]
    inlined: list[str] = field(default_factory=list)
    row_work: int = 0  # of a generic kernel's block: the work a call of fewer rows runs in proportion
    once_work: int = 0  # the work a generic kernel's part runs in its first block of a call only

    @property
    def arguments(self) -> list[Buffer]:
        """Kernel arguments: inputs, outputs, then temporaries (allocated per call)."""
        return self.inputs + self.outputs + self.temps


# ---- printing ------------------------------------------------------------------------------

def const_text(node: Expr) -> str:
    """An exact constant: ``repr`` of the value (so the text can key a cache), typed by suffix."""
    v = node.arg
    if isinstance(v, float) and not math.isfinite(v):  # -inf, not -inff; float64 says so
        return repr(v) if node.dtype == "float32" else f"{node.dtype}({v!r})"
    if node.dtype == "float32":
        return f"{v!r}f"
    if node.dtype == "bool":
        return "True" if v else "False"
    return repr(v) if node.dtype != "int64" else f"{v}L"


def _expr_rules(namer: Namer, buffers: dict[Tensor, Buffer], names: Namer | None = None) -> dict:
    """The IR printer's table with exact constants and reads of buffers as ``name[i, j]``
    (a buffer's own name, or its tensor's name in ``names`` when given)."""

    def read(n, *idx):
        buf = buffers.get(n.arg)
        name = namer.tensor(n.arg) if buf is None else buf.name if names is None else names.tensor(buf.tensor)
        return f"{name}[{', '.join(idx)}]"

    return {**expr_table(namer), Op.CONST: const_text, Op.READ: read}


class ProgramPrinter:
    """Readable, deterministic and exact text of a program (it also keys the kernel cache).  ``names``: a
    :class:`Namer` shared with other printouts (buffers shown under their tensors' names), else lowering's."""

    def __init__(self, program: Program, names: Namer | None = None) -> None:
        self.program, self.names = program, names
        self.namer = Namer() if names is None else names.for_block()
        self.rules = _expr_rules(self.namer, program.buffers, names)
        self.lines: list[str] = []

    def expr(self, e: Expr) -> str:
        return fold_text(e, self.rules)

    def buffer(self, b: Buffer) -> str:
        return b.name if self.names is None else self.names.tensor(b.tensor)

    def text(self) -> str:
        p = self.program
        base = self.namer
        sig = ", ".join(f"{self.buffer(b)}: {b.dtype}{list(b.shape)}" for b in p.inputs)
        outs = ", ".join(f"{self.buffer(b)}: {b.dtype}{list(b.shape)}" for b in p.outputs)
        self.lines = [f"kernel {p.name}({sig}) -> ({outs})"]
        if p.inlined:
            self.lines.append(f"  # inlined: {', '.join(p.inlined)}")
        for b in p.temps:
            self.lines.append(f"  allocate {self.buffer(b)}: {b.dtype}{list(b.shape)}")
        for step in p.steps:
            if isinstance(step, Fill):
                zero = step.value.op is Op.CONST and not step.value.arg
                what = "memset 0" if zero else f"fill {self.expr(step.value)}"
                par = "parallel " if step.parallel else ""
                self.lines.append(f"  {par}{what} -> {self.buffer(step.buffer)}")
                continue
            note = f" ({step.note})" if step.note else ""
            self.lines.append(f"  # nest {step.name}: work {step.work}{note}")
            self.namer = base.for_block()  # loop variables are numbered afresh per nest
            self.rules = _expr_rules(self.namer, p.buffers, self.names)
            self.block(step.body, 1)
        return "\n".join(self.lines) + "\n"

    def block(self, stmts: tuple, depth: int) -> None:
        pad = "  " * depth
        for s in stmts:
            if isinstance(s, Loop):
                step = "" if s.step == 1 else f", {s.step}"
                par = "parallel " if s.kind == "parallel" else ""
                self.lines.append(f"{pad}{par}for {self.namer.var(s.var)} in "
                                  f"range({self.expr(s.lo)}, {self.expr(s.hi)}{step}):")
                self.block(s.body, depth + 1)
            elif isinstance(s, If):
                self.lines.append(f"{pad}if {self.expr(s.cond)}:")
                self.block(s.then, depth + 1)
                if s.orelse:
                    self.lines.append(f"{pad}else:")
                    self.block(s.orelse, depth + 1)
            elif isinstance(s, Store):
                idx = ", ".join(self.expr(i) for i in s.index)
                self.lines.append(f"{pad}{self.buffer(s.buffer)}[{idx}] = {self.expr(s.value)}")
            elif isinstance(s, Assign):
                lhs = ", ".join(self.namer.var(t) for t in s.targets)
                rhs = ", ".join(self.expr(v) for v in s.values)
                self.lines.append(f"{pad}{lhs} = {rhs}")
            else:
                raise TypeError(f"unknown statement {s!r}")


def program_text(program: Program, names: Namer | None = None) -> str:
    """The program's text; ``names`` as in :class:`ProgramPrinter`."""
    return ProgramPrinter(program, names).text()


def owned(st, owner):
    """``st`` (a statement, recursively) with ``owner`` set on its stores and assignments."""
    return map_stmt(st, lambda e: e, lambda x: replace(x, owner=owner))


def map_stmt(st, expr: Callable[[Expr], Expr], leaf: Callable | None = None):
    """``st`` rebuilt with ``expr`` applied to each bound, condition, index and value
    (recursively through loops and ifs), then ``leaf`` to each store and assignment."""
    if isinstance(st, Loop):
        return Loop(st.var, expr(st.lo), expr(st.hi), tuple(map_stmt(s, expr, leaf) for s in st.body),
                    st.step, st.kind, st.dim)
    if isinstance(st, If):
        return If(expr(st.cond), tuple(map_stmt(s, expr, leaf) for s in st.then),
                  tuple(map_stmt(s, expr, leaf) for s in st.orelse), st.affine)
    if isinstance(st, Store):
        made = Store(st.buffer, tuple(map(expr, st.index)), expr(st.value), st.counted, st.owner)
    elif isinstance(st, Assign):
        made = replace(st, values=tuple(map(expr, st.values)))
    else:
        raise TypeError(f"unknown statement {st!r}")
    return made if leaf is None else leaf(made)


def owner_of(st):
    """The owner of a statement (an ``if``'s: that of the first store or assignment in it)."""
    if isinstance(st, (Store, Assign)):
        return st.owner
    if isinstance(st, (If, Loop)):
        for x in (st.then + st.orelse if isinstance(st, If) else st.body):
            found = owner_of(x)
            if found is not None:
                return found
    return None


def const_trips(loop: Loop) -> int | None:
    """A loop's trip count when its bounds are constant."""
    if loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST:
        return None
    return max(0, -(-(int(loop.hi.arg) - int(loop.lo.arg)) // loop.step))


def walk_stmts(stmts: tuple):
    """Every statement among ``stmts`` and inside their loops and ifs, each before its body."""
    for s in stmts:
        yield s
        if isinstance(s, Loop):
            yield from walk_stmts(s.body)
        elif isinstance(s, If):
            yield from walk_stmts(s.then + s.orelse)


def stmt_exprs(s) -> tuple:
    """The expressions of one statement (bounds, a condition, indices, values), not of those inside it."""
    if isinstance(s, Loop):
        return (s.lo, s.hi)
    if isinstance(s, If):
        return (s.cond,)
    return (*s.index, s.value) if isinstance(s, Store) else s.values


def stores(stmts: tuple) -> list[Store]:
    """Every ``Store`` among ``stmts``, inside loops and both branches of ``If``s, in order."""
    return [s for s in walk_stmts(stmts) if isinstance(s, Store)]


def nest_exprs(stmts: tuple):
    """Every expression of the statements (bounds, conditions, indices, values)."""
    return (e for s in walk_stmts(stmts) for e in stmt_exprs(s))


def nest_buffers(stmts: tuple) -> dict:
    """The tensors whose buffers the statements read or store, in first-use order (a dict used
    as an ordered set): the parameters of a nest's function."""
    found: dict = {}
    seen: set[Expr] = set()  # (shared subexpressions of the statements: visited once)
    for s in walk_stmts(stmts):
        if isinstance(s, Store):
            found.setdefault(s.buffer.tensor, None)
        elif not isinstance(s, (Loop, If, Assign)):
            raise TypeError(f"unknown statement {s!r}")
        for e in stmt_exprs(s):
            for n in walk_along(e, operands, seen):
                if n.op is Op.READ:
                    found.setdefault(n.arg, None)
    return found


