"""LLVM IR for a whole loop program.

Module layout (``P`` a prefix unique to the program, so many kernels share one JIT engine):

* ``P_nest<k>(ptr noalias b_i, ..., i64 lo, i64 hi)`` -- one function per nest, taking its buffers
  (:func:`.program.nest_buffers`) and, in checked mode, the violation record; a parallel nest runs its
  outermost loop over ``[lo, hi)`` only.  ``noalias`` is sound: outputs may not overlap other arguments.
* ``P_omp<k>(ptr region)`` -- the outlined body of a parallel loop for libgomp; ``region`` is
  ``{ptr args, i64 next, i64 team, i64 c}`` on ``P_main``'s stack.  Each thread takes chunk ``j = next++``
  (``atomicrmw add``, :meth:`ModuleEmitter.chunk_size`) until none is left; a matrix product is called
  once with the whole range and the address of ``next`` (:data:`.gemm.descriptor.H_SHARED`).
* ``P_fill<k>(ptr args)`` -- a parallel fill (:mod:`.loops.fills`) of whole pages per thread.
* ``P_main(ptr args, i32 nthreads)`` -- loads the buffer pointers and runs fills, then each nest, through
  ``GOMP_parallel`` when it is parallel, ``nthreads > 1`` and libgomp is present.

Loops are emitted rotated with ``i64`` induction variables; accumulators live in stack slots that SROA
promotes to registers.  A stored choice whose test reads only outer loops is tested outside the inner
loops (:func:`unswitched`).  Identical nests share one function (:mod:`.loops.nest_key`), also in a
program that tests gather indices, but for the nests that test them."""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace

import llvmlite.ir as ir

from tensorad.ir.expr import COMPARISONS, LOGICAL, Expr, Op
from tensorad.ir.rewrite import walk

from ..gemm.microkernel import GemmEmitter, row_blocks
from ..loops.nest_key import nest_key, shifted
from ..loops.shared_nests import RenamedNest
from ..program import (
    Assign,
    Buffer,
    Fill,
    If,
    Loop,
    Nest,
    Program,
    Store,
    const_trips,
    nest_buffers,
    nest_exprs,
    walk_stmts,
)
from ..target import Target, parse_target
from .bounds_checks import Checks, has_raise_gather_in
from .expr import I1, I8, I32, I64, LLTYPE, MEMTYPE, PTR, ExprEmitter, const_value
from .glue_table import fill_signature, runs, segments, signature
from .ir_loops import at_most_level, declare, loop_metadata
from .lanes import emit_in_lanes
from .masked_tails import masked_tail_width, narrow_row_width, overlapped_width, pointwise, short_row_width
from .math_functions import InlineBudget, MathLibrary, math_sites
from .unrolled_chains import WINDOW_TRIPS, rolled_inside_scatter, unrolled_chain_too_long, window_vector_width
from .vectorizable import loop_blocks_widenable, vectorizable

# Fast-math flags (``fastmath=True``), per instruction: values may contract into fused multiply-adds
# (``contract``), and the combining operations of a reduction (:func:`combining_nodes`) also get
# ``reassoc``, which lets LLVM vectorize them.  Nothing else (``arcp``, ``afn``, ``nnan``/``ninf`` and ``nsz``
# change results at large magnitudes and at 0, inf and NaN); no unsafe-fp-math options either.
VALUE_FLAGS = ("contract",)


def combining_nodes(values: tuple[Expr, ...], accumulators: tuple[Expr, ...]) -> frozenset[Expr]:
    """The nodes of an accumulator update reading one of its ``accumulators``: those given ``reassoc``."""
    out: set[Expr] = set(accumulators)
    for v in values:
        for n in walk(v):  # operands before users
            if any(x in out for x in n.src):
                out.add(n)
    return frozenset(out)


# The glue functions (``P_main``, each ``P_omp``) only load pointers and call the nests: they
# are compiled ``optnone``.  A serial fill of a non-zero value, the one loop over elements glue can hold,
# keeps ``P_main`` optimized, unless the program is past this many pointers or steps (then its glue is a
# function per this many steps, ``P_glue<j>``: :meth:`ModuleEmitter.main_function`, all ``optnone``).
GLUE_OPT_LIMIT = 64
# chunks per thread of a parallel loop's dynamic schedule (P_omp)
DYNAMIC_CHUNKS = 4
# vectors in the body of a loop LLVM vectorizes (its interleave count is at most 4 on x86)
VECTOR_BODY = 4

UNROLL_NEST_LIMIT = 256
# A matrix product's nest -- the driver loops and the packing of its sides, its arithmetic being the
# library's micro-kernel -- is optimized at -O2 at most: -O3's unswitching and larger unrolling multiply
# the code of its packing loops, and the time LLVM spends on it, for no measured speed.
PRODUCT_OPT_LEVEL = 2
#: the most LLVM optimizes a nest whose loop-invariant tests :func:`unswitched` split; on a target with
#: cheap masked memory (AVX-512: a vector loop's remainder is masked, not scalar) its loops that
#: accumulate nothing are kept from LLVM's unroller too (its copies of the inner loops are its code:
#: unrolling them multiplied the time LLVM spends on a Winograd transform, for no measured speed)
UNSWITCHED_OPT_LEVEL = 2
#: the most copies of a nest's inner loops :func:`unswitched` makes (a transform's rows: 4 or 6)
MAX_UNSWITCHED = 8
#: a nest function whose nests do at most 1/MINOR_SHARE of the work of the program's plain nests (a
#: product's points, run by the library's micro-kernel, cost a few hundredths of a plain point's) is
#: optimized at MINOR_OPT_LEVEL at most: -O3's full unrolling of it costs LLVM several times -O2's time
#: (a convolution's weight gradient beside its Winograd transforms: 60 ms against 18), for a share of
#: the run too small to measure
MINOR_SHARE = 128
MINOR_OPT_LEVEL = 2


def _fills_in_a_loop(step) -> bool:
    """Whether glue that runs ``step`` serially runs a loop over elements: a fill of a non-zero value."""
    return (isinstance(step, Fill) and step.buffer.size > 0
            and not (step.value.op is Op.CONST and not step.value.arg))


def nest_trips(s: Loop) -> int | None:
    """For a loop with loops inside, how many times full unrolling would copy its innermost body (constant
    trips down its deepest path), else ``None``.  An outer loop past :data:`UNROLL_NEST_LIMIT` copies, of
    at least :data:`WINDOW_TRIPS` trips, gets unrolling off; small windows stay unrollable."""

    def deepest(stmts: tuple) -> int | None:
        best = 1
        for st in stmts:
            inner = [st] if isinstance(st, Loop) else list(st.then + st.orelse) if isinstance(st, If) else []
            for x in inner:
                if isinstance(x, Loop):
                    t, d = const_trips(x), deepest(x.body)
                    if t is None or d is None:
                        return None
                    best = max(best, t * d)
                elif isinstance(x, If):
                    d = deepest((x,))
                    if d is None:
                        return None
                    best = max(best, d)
        return best

    if not any(isinstance(x, (Loop, If)) for x in s.body):
        return None
    t, d = const_trips(s), deepest(s.body)
    return None if t is None or d is None or d == 1 else t * d


def copies_loops(s: Loop) -> bool:
    """Whether full unrolling ``s`` (of constant trips) would copy whole loops: the trips of a loop inside it
    are set by the variable of a loop around ``s`` or by data, so each copy stays a loop, however far the
    loops between are unrolled (LLVM's ``-O3`` unrolls a short ``s`` anyway, multiplying code and compile
    time to save one branch a copy).  A loop whose trips ``s`` or the loops in it set is not counted."""
    if const_trips(s) is None:
        return False
    loops = [x for x in walk_stmts(s.body) if isinstance(x, Loop)]
    inside = {s.var, *(x.var for x in loops)}
    return any(const_trips(x) is None and any(n.op in (Op.VAR, Op.READ, Op.DATA_INDEX) and n not in inside
                                              for e in (x.lo, x.hi) for n in walk(e))
               for x in loops)


def accumulates(s: Loop) -> bool:
    """Whether a statement in ``s`` adds to a value: an accumulator's, or a store reading the buffer it
    writes (LLVM's unrolling sets the order such sums are added in, so it is never turned off there)."""
    return any(isinstance(x, Assign) or isinstance(x, Store) and any(
        n.op is Op.READ and n.arg is x.buffer.tensor for n in walk(x.value)) for x in walk_stmts(s.body))


_PURE_INDEX = frozenset({Op.VAR, Op.CONST, Op.ADD, Op.SUB, Op.MUL, *COMPARISONS, *LOGICAL})


def _invariant_test(cond: Expr, inner: set[Expr]) -> bool:
    """Whether ``cond`` is index arithmetic that cannot trap (divisions by nonzero constants) and reads
    none of the ``inner`` loop variables: testing it once outside those loops gives what each test gives."""
    for n in walk(cond):
        if n in inner:
            return False
        if n.op in (Op.FLOORDIV, Op.MOD):
            if n.src[1].op is not Op.CONST or not n.src[1].arg:
                return False
        elif n.op not in _PURE_INDEX:
            return False
    return True


def _branches(value: Expr, inner: set[Expr]) -> int:
    """The values ``value`` chooses among by tests that read none of the ``inner`` loop variables."""
    if value.op is not Op.IF_THEN_ELSE or not _invariant_test(value.src[0], inner):
        return 1
    return _branches(value.src[1], inner) + _branches(value.src[2], inner)


def unswitched(stmts: tuple) -> tuple:
    """``stmts`` with each perfect loop nest that stores a lazy ``if_then_else`` whose test is index
    arithmetic read by none of its inner loops (a transform's row chosen by an outer axis, as Winograd's)
    split outside those loops: one copy of them per branch, each storing its branch (``stmts`` itself
    where none is split).  LLVM's ``-O3`` would unswitch such a test loop by loop; split here, the nest
    compiles at :data:`UNSWITCHED_OPT_LEVEL` as fast, in about half the time (a Winograd transform's)."""
    out = []
    for s in stmts:
        if isinstance(s, Loop):
            s = _unswitched_loop(s)
        elif isinstance(s, If):
            then, orelse = unswitched(s.then), unswitched(s.orelse)
            if then is not s.then or orelse is not s.orelse:
                s = replace(s, then=then, orelse=orelse)
        out.append(s)
    return stmts if all(a is b for a, b in zip(out, stmts)) else tuple(out)


def _unswitched_loop(s: Loop) -> Loop | If:
    chain, leaf = [s], s.body
    while len(leaf) == 1 and isinstance(leaf[0], Loop):
        chain.append(leaf[0])
        leaf = leaf[0].body
    store = leaf[0] if len(leaf) == 1 else None
    if isinstance(store, Store) and store.value.op is Op.IF_THEN_ELSE:
        cond, yes, no = store.value.src
        depth, inner = len(chain), set()
        while depth > 0 and _invariant_test(cond, inner | {chain[depth - 1].var}):
            depth -= 1
            inner.add(chain[depth].var)
        if depth < len(chain) and _branches(store.value, inner) <= MAX_UNSWITCHED:
            def copy(value: Expr) -> tuple:
                body: tuple = (replace(store, value=value),)
                for loop in reversed(chain[depth:]):
                    body = (replace(loop, body=body),)
                return unswitched(body)
            split: Loop | If = If(cond, copy(yes), copy(no), affine=False)
            for loop in reversed(chain[:depth]):
                split = replace(loop, body=(split,))
            return split
    body = unswitched(s.body)
    return s if body is s.body else replace(s, body=body)


class ModuleEmitter:
    def __init__(self, program: Program, prefix: str, fastmath: bool = True, use_gomp: bool = True,
                 vector_width: int | None = None, checks: Checks | None = None, target=None) -> None:
        self.program, self.prefix, self.target = program, prefix, target
        self.fastmath, self.use_gomp, self.vector_width = fastmath, use_gomp, vector_width
        self.module = ir.Module(name=prefix)
        self.args = program.arguments
        # checked mode (:mod:`.llvm.bounds_checks`): the violation record is one more pointer
        self.checks = checks
        self.nptr = len(self.args) + (checks is not None)
        self.params: dict[int, list[int]] = {}  # nest step -> the pointer positions it takes
        # a nest's name-free key -> (its function, its buffers' pointer positions); where every
        # access is checked, each site names its tensor and no nest is shared
        self.shared: dict[tuple, tuple[ir.Function, list[int], dict[int, int]]] | None = \
            {} if checks is None or not checks.every_access else None
        self.source_keys: dict[int, tuple] = {}  # id(a renamed nest's source) -> (its key, it)
        self.offsets: dict[int, list[int]] = {}  # nest step -> the elements each pointer it takes is advanced
        self.arg_index = {b.tensor: k for k, b in enumerate(self.args)}
        self._rolled: set[int] = set()  # ids of the loops kept rolled (.chains.rolled_inside_scatter)
        self._read_in_nest = lambda tensor: True  # whether the nest being emitted reads a tensor's buffer
        self._row_lanes = (0, 0)  # its scan's rows: lanes and loops (.program.NestAttrs.row_lanes)
        self._unroll = True  # (False in a nest :func:`unswitched` split: its loops stay rolled)
        for t, b in program.buffers.items():  # tensors sharing another's buffer (padded chunks)
            if t not in self.arg_index and b.tensor in self.arg_index:
                self.arg_index[t] = self.arg_index[b.tensor]

    def _target(self) -> Target:
        return self.target or parse_target()

    def _lanes(self, dtype: str) -> int:
        try:
            return self._target().lanes(dtype)
        except ValueError:  # (bool: as wide as int32)
            return self._target().lanes("int32")

    @property
    def main_name(self) -> str:
        return f"{self.prefix}_main"

    def emit(self) -> ir.Module:
        nests = []
        self.fill_fns: dict[int, ir.Function] = {}
        # vector math: inline in the first small nests, else calls (:mod:`.llvm.math_functions`)
        self.mathlib = MathLibrary(self.module, self.prefix, self._target().lanes)
        self.math_budget = InlineBudget()
        for k, step in enumerate(self.program.steps):
            if isinstance(step, Nest):
                fn = self.nest_function(k, step)
                omp = self.omp_function(k, step, fn) if step.parallel and self.use_gomp else None
                nests.append((k, step, fn, omp))
            elif step.parallel and self.use_gomp and step.buffer.size:
                self.fill_fns[id(step)] = self.fill_function(k, step)
        self.main_function(nests)
        self.mathlib.finish()
        work: dict[ir.Function, int] = {}  # (a plain nest function's: of all the nests calling it)
        for _, step, fn, _ in nests:
            if step.attrs.gemm is None:
                work[fn] = work.get(fn, 0) + step.work
        total = sum(work.values())
        for fn, w in work.items():
            if w * MINOR_SHARE <= total:
                at_most_level(fn, MINOR_OPT_LEVEL)
        return self.module

    def nest_function(self, k: int, nest: Nest) -> ir.Function:
        """The function running ``nest`` (step ``k``): a new one, or that of an earlier nest
        with the same name-free key (:mod:`.loops.nest_key`), called with this nest's pointers, each
        advanced by its buffer's leading offset (:func:`.loops.nest_key.shifted`)."""
        keyed = None
        if self.shared is not None and not (self.checks is not None and has_raise_gather_in(nest)):
            keyed = self._nest_key(nest)  # (a nest testing gather indices names them: never shared)
        if keyed is not None:
            nest, key, order, bases = keyed
            found = self.shared.get(key)
            if found is not None:
                fn, _, where = found
                params = [0] * len(where)
                for j, buf in enumerate(order):
                    params[where[j]] = self.arg_index[buf.tensor]
                self.params[k] = params + ([len(self.args)] if self.checks is not None else [])
                self._offset(k, bases)
                return fn
        fn = self._new_nest_function(k, nest)
        if keyed is not None:
            self._offset(k, bases)
            position = {a: p for p, a in enumerate(self.params[k])}
            self.shared[key] = (fn, self.params[k], {j: position[self.arg_index[buf.tensor]]
                                                     for j, buf in enumerate(order)})
        return fn

    def _offset(self, k: int, bases: dict[Buffer, int]) -> None:
        """Step ``k``'s pointers advanced by ``bases`` (leading-axis constants) times leading strides."""
        if bases:
            moved = {self.arg_index[b.tensor]: c * b.strides[0] for b, c in bases.items()}
            self.offsets[k] = [moved.get(a, 0) for a in self.params[k]]

    def _advanced(self, b: ir.IRBuilder, k: int, own: list) -> list[ir.Value]:
        """Step ``k``'s pointers ``own`` (at its positions) advanced by its offsets."""
        offsets = self.offsets.get(k) or [0] * len(own)
        return [b.gep(p, [I64(off)], inbounds=True, source_etype=MEMTYPE[self.args[a].dtype]) if off else p
                for p, a, off in zip(own, self.params[k], offsets)]

    def _nest_key(self, nest: Nest) -> tuple[Nest, tuple, list, dict] | None:
        """``(the nest to emit, its key, its buffers in the key's order, their leading offsets)``: outside
        checked mode the nest :func:`.loops.nest_key.shifted`, then keyed by
        :func:`.loops.nest_key.nest_key`; a renamed nest's is its source's, taken once, with the buffers
        mapped (its body is never renamed for a build but where it is emitted)."""
        if not isinstance(nest, RenamedNest):
            return self._shifted_key(nest, lambda t: self.args[self.arg_index[t]])
        found = self.source_keys.get(id(nest.source))
        if found is None:
            try:
                keyed = self._shifted_key(nest.source, nest.source_buffer)
            except KeyError:  # (a tensor read without a buffer: no key, the body is renamed)
                keyed = None
            found = self.source_keys[id(nest.source)] = (keyed, nest.source)
        if found[0] is None:
            return None
        _, key, order, bases = found[0]
        emitted = shifted(nest, lambda t: self.args[self.arg_index[t]])[0] if bases else nest
        return emitted, key, [nest.buffer(b) for b in order], {nest.buffer(b): c for b, c in bases.items()}

    def _shifted_key(self, nest: Nest, buffer_of) -> tuple[Nest, tuple, list, dict] | None:
        moved, bases = shifted(nest, buffer_of) if self.checks is None else (nest, {})
        keyed = nest_key(moved, buffer_of)
        if keyed is None and bases:  # (not keyed: emitted as it is)
            return None
        return None if keyed is None else (moved, keyed[0], keyed[1], bases)

    def _new_nest_function(self, k: int, nest: Nest) -> ir.Function:
        spec = nest.attrs.gemm
        gemm = GemmEmitter(self.module, spec, f"{self.prefix}_nest{k}") if spec is not None else None
        used = sorted({self.arg_index[t] for t in (gemm.tensors() if gemm else nest_buffers(nest.body))})
        counted = self.checks is not None and self.checks.every_access and gemm is None \
            and any(a in self.checks.rows for a in used)
        used = sorted({*used, self.checks.count}) if counted else used  # (rows: tested at the count)
        where = {a: p for p, a in enumerate(used)}
        self.params[k] = used + ([len(self.args)] if self.checks is not None else [])
        # (a matrix product also takes its parallel loop's shared schedule, or null)
        fnty = ir.FunctionType(ir.VoidType(), [PTR] * len(self.params[k]) + [I64, I64]
                               + [PTR] * (nest.attrs.gemm is not None))
        fn = ir.Function(self.module, fnty, f"{self.prefix}_nest{k}")
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        for a in fn.args[:len(used)]:
            a.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        b = ir.IRBuilder(entry)
        slots = {acc: b.alloca(LLTYPE[acc.dtype], name=acc.name) for acc in nest.accumulators}
        b.branch(start)
        b.position_at_end(start)
        params = fn.args

        def pointer(t):
            return params[where[self.arg_index[t]]]
        if gemm is not None:
            at_most_level(fn, PRODUCT_OPT_LEVEL)
            gemm.emit(b, pointer, lambda t: self.args[self.arg_index[t]].strides,
                      fn.args[-3], fn.args[-2], VALUE_FLAGS if self.fastmath else (), fn.args[-1])
            b.ret_void()
            return fn
        em = ExprEmitter(b, pointer,
                         lambda t: self.args[self.arg_index[t]].strides,
                         VALUE_FLAGS if self.fastmath else (), target=self.target)
        em.accs = slots
        if not self.math_budget.inline(math_sites(nest_exprs(nest.body))):
            em.mathlib = self.mathlib
        if self.checks is not None:
            record = params[len(used)]

            def check(t, kind, index, values):
                buf, rows = self.args[self.arg_index[t]], None
                if self.arg_index[t] in self.checks.rows:  # (the rows a call gives: the count, clipped)
                    count = em.b.load(params[where[self.checks.count]], typ=I64)
                    rows = em.b.select(em.b.icmp_unsigned("<", count, I64(buf.shape[0])), count,
                                       I64(buf.shape[0]))
                self.checks.emit(em.b, record, buf.name, kind, buf.shape, index, values, rows)
            if self.checks.every_access:
                em.check = check
            em.gather_check = lambda node, value, position: self.checks.emit_gather(
                em.b, record, node, value, position)
        read = {self.arg_index.get(n.arg) for e in nest_exprs(nest.body) for n in walk(e) if n.op is Op.READ}
        self._read_in_nest = lambda t: self.arg_index.get(t) in read  # (.masktail.pointwise)
        self._row_lanes = nest.attrs.row_lanes or (0, 0)
        body = unswitched(nest.body)
        if body is not nest.body:
            at_most_level(fn, UNSWITCHED_OPT_LEVEL)
        # (a target without cheap masked memory runs a vector loop's remainder as scalar code, which
        # LLVM's unrolling pays for: 1.5x slower rolled on -mcpu=haswell)
        self._unroll = body is nest.body or not self._target().masked_memory
        self.block(em, body, (fn.args[-2], fn.args[-1]) if nest.parallel else None)
        self._read_in_nest = lambda tensor: True
        self._row_lanes, self._unroll = (0, 0), True
        b.ret_void()
        return fn

    def block(self, em: ExprEmitter, stmts: tuple, range_override=None) -> None:
        """``range_override``: the ``[lo, hi)`` of the nest's parallel loop, at any depth (a scatter's)."""
        for s in stmts:
            if isinstance(s, Loop):
                self.loop(em, s, range_override)
            elif isinstance(s, If):
                self.if_(em, s, range_override)
            elif isinstance(s, Store):
                em.push()
                em.store(s.buffer.tensor, s.index, em.value(s.value))
                em.pop()
            elif isinstance(s, Assign):
                em.push()
                if self.fastmath:
                    em.combining = combining_nodes(s.values, s.targets)
                vals = [em.value(v) for v in s.values]
                em.combining = frozenset()
                for t, v in zip(s.targets, vals):
                    em.b.store(em.narrow(v, LLTYPE[t.dtype]), em.accs[t])
                em.pop()
            else:
                raise TypeError(f"unknown statement {s!r}")

    def loop(self, em: ExprEmitter, s: Loop, range_override=None) -> None:
        if emit_in_lanes(self, em, s, self._lanes):  # (order-free updates: see .lanes)
            return
        b = em.b
        parallel = s.kind == "parallel" and range_override is not None  # (its thread's share of the rows)
        if not parallel and (lanes := overlapped_width(s, self._target(), em.strides, self._read_in_nest)):
            lo, hi = int(s.lo.arg), int(s.hi.arg)  # (whole vectors, then one ending at hi: .masked_tails)
            whole, vector = lo + (hi - lo) // lanes * lanes, True
            for first, last in ((lo, whole), (hi - lanes, hi)):
                body_bb, exit_bb, iv, br = self._open(em, s, I64(first if vector else whole), I64(last))
                vector = vector and vectorizable(body_bb, b.block, iv, em.accs.values())
                hint = {"width": lanes, "forced": True, "interleave": 1} if vector else {"vectorize": False}
                br.set_metadata("llvm.loop", loop_metadata(self.module, unroll=False, **hint))
                b.position_at_end(exit_bb)
            return
        if parallel:
            lo, hi = range_override
            if s.hi.op is not Op.CONST:  # (a bound read when it runs: .passes.row_bound)
                hi = b.call(declare(self.module, "llvm.smin.i64", I64, [I64, I64]), [hi, em.index(s.hi)])
        else:
            lo, hi = em.index(s.lo), em.index(s.hi)
        body_bb, exit_bb, iv, br = self._open(em, s, lo, hi, range_override)
        lanes, loops = self._row_lanes
        rows = 0 <= s.dim < loops  # (a loop over a scan's rows: .program.NestAttrs.row_lanes)
        unroll = self._unroll or accumulates(s)
        if unrolled_chain_too_long(s) or (rows and lanes == 1):  # (or LLVM's vectorizer would not return)
            br.set_metadata("llvm.loop", loop_metadata(self.module, vectorize=False))
        elif rows:
            br.set_metadata("llvm.loop", loop_metadata(self.module, width=lanes, unroll=unroll))
        elif (nest_trips(s) or 0) > UNROLL_NEST_LIMIT and (const_trips(s) or 0) >= WINDOW_TRIPS:
            br.set_metadata("llvm.loop", loop_metadata(self.module, unroll=False))
        elif (self.vector_width and not any(isinstance(x, Loop) for x in s.body)
              and vectorizable(body_bb, b.block, iv, em.accs.values(), const_trips(s))):
            br.set_metadata("llvm.loop", loop_metadata(self.module, width=self.vector_width, unroll=unroll))
        elif ((width := masked_tail_width(s, self._target(), em.strides)) is not None  # (see .masktail)
              and vectorizable(body_bb, b.block, iv, em.accs.values(), const_trips(s))):
            unroll = unroll and not pointwise(s, self._read_in_nest)
            br.set_metadata("llvm.loop", loop_metadata(self.module, width=width, masked_tail=True,
                                                             unroll=unroll))
        elif ((width := short_row_width(s, self._target(), em.strides)) is not None
              and pointwise(s, self._read_in_nest)
              and vectorizable(body_bb, b.block, iv, em.accs.values(), const_trips(s))):
            br.set_metadata("llvm.loop", loop_metadata(self.module, width=width, unroll=False))
        elif ((width := narrow_row_width(s, self._target(), em.strides)) is not None  # (see .masktail)
              and vectorizable(body_bb, b.block, iv, em.accs.values())):
            br.set_metadata("llvm.loop", loop_metadata(self.module, width=width, unroll=False, forced=True))
        elif ((width := window_vector_width(s, self._lanes)) is not None  # (see .chains)
              and loop_blocks_widenable(_loop_blocks(body_bb, exit_bb), exit_bb, iv, const_trips(s))):
            br.set_metadata("llvm.loop", loop_metadata(self.module, width=width, unroll=unroll))
        elif id(s) in self._rolled or copies_loops(s) or not unroll:
            br.set_metadata("llvm.loop", loop_metadata(self.module, unroll=False))
        b.position_at_end(exit_bb)

    def _open(self, em: ExprEmitter, s: Loop, lo: ir.Value, hi: ir.Value, range_override=None) -> tuple:
        """``s`` over ``[lo, hi)``, its body emitted: ``(body, exit, variable, back branch)``."""
        b, pre = em.b, em.b.block
        body_bb = b.append_basic_block(f"{s.var.name}.body")
        exit_bb = b.append_basic_block(f"{s.var.name}.exit")
        b.cbranch(b.icmp_signed("<", lo, hi), body_bb, exit_bb)
        b.position_at_end(body_bb)
        iv = b.phi(I64, name=s.var.name)
        iv.add_incoming(lo, pre)
        em.env[s.var] = iv
        em.push()
        self._rolled.update(id(x) for x in rolled_inside_scatter(s, em.strides, UNROLL_NEST_LIMIT))  # .chains
        self.block(em, s.body, range_override)
        em.pop()
        del em.env[s.var]
        nxt = b.add(iv, I64(s.step), flags=("nsw",))
        iv.add_incoming(nxt, b.block)
        return body_bb, exit_bb, iv, b.cbranch(b.icmp_signed("<", nxt, hi), body_bb, exit_bb)

    def if_(self, em: ExprEmitter, s: If, range_override=None) -> None:
        b = em.b
        cond = em.index(s.cond) if s.affine else em.value(s.cond)
        then_bb = b.append_basic_block("if.then")
        else_bb = b.append_basic_block("if.else") if s.orelse else None
        join_bb = b.append_basic_block("if.join")
        b.cbranch(cond, then_bb, else_bb or join_bb)
        for bb, stmts in ((then_bb, s.then), (else_bb, s.orelse)):
            if bb is None:
                continue
            b.position_at_end(bb)
            em.push()
            self.block(em, stmts, range_override)
            em.pop()
            b.branch(join_bb)
        b.position_at_end(join_bb)

    def _load_pointers(self, b: ir.IRBuilder, args: ir.Value) -> list[ir.Value]:
        return [b.load(b.gep(args, [I64(k)], inbounds=True, source_etype=PTR), typ=PTR)
                for k in range(self.nptr)]

    def omp_function(self, k: int, nest: Nest, nest_fn: ir.Function) -> ir.Function:
        """``P_omp<k>(ptr region)``: the threads' dynamic schedule of the nest's parallel loop."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), f"{self.prefix}_omp{k}")
        fn.attributes.add("nounwind")
        self._glue(fn)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        region = fn.args[0]
        args = b.inttoptr(b.load(region_field(b, region, 0), typ=I64), PTR)
        shared = region_field(b, region, 1)
        # (a large program's parallel nest loads only its own pointers)
        ptrs = _LazyPointers(b, args) if self._large() else self._load_pointers(b, args)
        own = self._advanced(b, k, [ptrs[p] for p in self.params[k]])
        first, stop, step = nest.attrs.range
        if nest.attrs.gemm is not None:
            b.call(nest_fn, own + [I64(first), I64(stop), shared])
            b.ret_void()
            return fn
        chunk = b.load(region_field(b, region, 3), typ=I64)
        trips = (stop - first + step - 1) // step
        head = b.append_basic_block("chunk")
        body = b.append_basic_block("chunk.run")
        done = b.append_basic_block("chunk.done")
        b.branch(head)
        b.position_at_end(head)
        start = b.mul(b.atomic_rmw("add", shared, I64(1), "monotonic"), chunk)
        b.cbranch(b.icmp_signed("<", start, I64(trips)), body, done)
        b.position_at_end(body)
        lo = b.add(I64(first), b.mul(start, I64(step)))
        hi = b.call(declare(self.module, "llvm.smin.i64", I64, [I64, I64]),
                    [b.add(lo, b.mul(chunk, I64(step))), I64(stop)])
        b.call(nest_fn, own + [lo, hi])
        b.branch(head)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def chunk_size(self, b: ir.IRBuilder, nest: Nest, team: ir.Value, ptrs) -> ir.Value:
        """The trips of a chunk of ``nest``'s parallel loop for ``team`` threads: about ``DYNAMIC_CHUNKS``
        per thread (one inside other loops), a multiple of the nest's ``grain`` and, given trips enough,
        of a vector body (vector and scalar code may round differently); a product's: its blocks, those
        below a generic kernel's count of rows where they are its batch (``ptrs``: the buffers')."""
        first, stop, step = nest.attrs.range
        trips = (stop - first + step - 1) // step
        whole = nest.attrs.gemm is not None or (len(nest.body) == 1 and isinstance(nest.body[0], Loop)
                                         and nest.body[0].kind == "parallel")
        parts = b.mul(team, I64(DYNAMIC_CHUNKS if whole else 1))
        if nest.attrs.gemm is not None:
            runs = row_blocks(b, nest.attrs.gemm, lambda t: ptrs[self.arg_index[t]],
                              lambda t: self.args[self.arg_index[t]].strides)
            if runs is not None:  # (at least one trip: a chunk of none would take no blocks)
                runs = b.call(declare(self.module, "llvm.smax.i64", I64, [I64, I64]), [b.call(
                    declare(self.module, "llvm.smin.i64", I64, [I64, I64]),
                    [b.sub(runs, I64(first)), I64(trips)]), I64(1)])
            runs = I64(trips) if runs is None else runs
            return b.sdiv(b.add(runs, b.sub(parts, I64(1))), parts)
        chunk = b.sdiv(b.add(I64(trips), b.sub(parts, I64(1))), parts)
        grain = nest.attrs.grain
        lanes = max((self._lanes(t.dtype) for t in nest_buffers(nest.body)), default=1)  # (none)
        vector = math.lcm(grain, VECTOR_BODY * lanes)
        unit = b.select(b.icmp_signed(">=", I64(trips), b.mul(parts, I64(vector))), I64(vector), I64(grain))
        return b.mul(b.sdiv(b.add(chunk, b.sub(unit, I64(1))), unit), unit)

    def _glue(self, fn: ir.Function, steps=()) -> None:
        """``optnone`` for a glue function (:data:`GLUE_OPT_LIMIT`), unless it fills a buffer with a
        non-zero value in a loop (one of ``steps``) in a program that is not large."""
        if self._large() or not any(_fills_in_a_loop(s) for s in steps):
            fn.attributes.add("noinline")
            fn.attributes.add("optnone")

    def _large(self) -> bool:
        return max(self.nptr, len(self.program.steps)) > GLUE_OPT_LIMIT

    def main_function(self, nests: list) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I32]), self.main_name)
        self._glue(fn, self.program.steps)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args, nthreads = fn.args
        by_step = {id(n): (fn_, omp, k) for k, n, fn_, omp in nests}
        if not self._large():
            self._steps(b, args, nthreads, self.program.steps, self._load_pointers(b, args), by_step)
            b.ret_void()
            return fn
        # a large program's glue is a call per GLUE_OPT_LIMIT steps, each loading its steps' pointers;
        # runs of equal segments loop over a table of pointer positions (:mod:`.llvm.glue_table`)
        steps = self.program.steps
        start = 0
        for first, stop, unit in self._runs(by_step):
            self._straight(b, fn, start, first, by_step)
            part = self._run_function(first, stop, unit, by_step)
            b.call(part, [args, nthreads])
            start = stop
        self._straight(b, fn, start, len(steps), by_step)
        b.ret_void()
        return fn

    def _straight(self, b: ir.IRBuilder, fn: ir.Function, start: int, stop: int, by_step: dict) -> None:
        """Calls from ``P_main`` of a glue function per ``GLUE_OPT_LIMIT`` of steps ``[start, stop)``."""
        steps = self.program.steps
        args, nthreads = fn.args
        for j in range(start, stop, GLUE_OPT_LIMIT):
            part = ir.Function(self.module, fn.ftype, f"{self.prefix}_glue{j}")
            chunk = steps[j:min(j + GLUE_OPT_LIMIT, stop)]
            self._glue(part, chunk)
            pb = ir.IRBuilder(part.append_basic_block("entry"))
            self._steps(pb, part.args[0], part.args[1], chunk, _LazyPointers(pb, part.args[0]), by_step)
            pb.ret_void()
            b.call(part, [args, nthreads])
            if self.checks is not None:  # (the part stopped at a violation: so does main)
                slot = b.gep(args, [I64(self.nptr - 1)], inbounds=True, source_etype=PTR)
                with b.if_then(self.checks.failed(b, b.load(slot, typ=PTR)), likely=False):
                    b.ret_void()

    def _describe(self, step, by_step: dict) -> tuple | None:
        """A step's part of a segment's signature (:mod:`.llvm.glue_table`), ``None`` when it cannot
        run from a table: a parallel fill or nest, or any step in checked mode."""
        if self.checks is not None:
            return None
        if isinstance(step, Fill):
            return None if id(step) in self.fill_fns else fill_signature(step)
        nest_fn, omp, k = by_step[id(step)]
        if omp is not None or step.attrs.first_block:
            return None
        return ("call", id(nest_fn), len(self.params[k]), tuple((step.attrs.range or (0, 0, 1))[:2]),
                step.attrs.gemm is not None, tuple(self.offsets.get(k, ())))

    def _positions(self, step, by_step: dict) -> list[int]:
        """The pointer positions a step passes (its part of a table row)."""
        if isinstance(step, Fill):
            return [self.arg_index[step.buffer.tensor]]
        return list(self.params[by_step[id(step)][2]])

    def _runs(self, by_step: dict) -> list[tuple[int, int, int]]:
        """``(first, stop, unit)`` (step numbers) of each run of repeated segments (.glue_table.runs)."""
        steps = self.program.steps
        segs = segments(steps)
        sigs = [signature(steps[a:z], lambda s: self._describe(s, by_step)) for a, z in segs]
        return [(segs[f][0], segs[s - 1][1], segs[f + p - 1][1] - segs[f][0]) for f, s, p in runs(sigs)]

    def _run_function(self, first: int, stop: int, unit: int, by_step: dict) -> ir.Function:
        """``P_run<first>(ptr args, i32 nthreads)``: steps ``[first, stop)``, one repeated unit of
        ``unit`` steps, as a loop over a constant table of each repetition's pointer positions."""
        steps = self.program.steps
        shape = steps[first:first + unit]  # (the first repetition's steps: every one's code)
        rows = [[p for s in steps[k:k + unit] for p in self._positions(s, by_step)]
                for k in range(first, stop, unit)]
        width = len(rows[0])
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I32]), f"{self.prefix}_run{first}")
        self._glue(fn)
        table_t = ir.ArrayType(I32, len(rows) * width)
        table = ir.GlobalVariable(self.module, table_t, f"{self.prefix}_table{first}")
        table.linkage = "private"
        table.global_constant = True
        table.initializer = ir.Constant(table_t, [I32(p) for row in rows for p in row])
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        args = fn.args[0]
        body = fn.append_basic_block("run.body")
        done = fn.append_basic_block("run.exit")
        b.branch(body)
        b.position_at_end(body)
        r = b.phi(I64, name="row")
        r.add_incoming(I64(0), fn.blocks[0])
        base = b.mul(r, I64(width))
        slot = 0
        for step in shape:
            ptrs = []
            for _ in self._positions(step, by_step):
                at = b.gep(table, [I64(0), b.add(base, I64(slot))], inbounds=True, source_etype=table_t)
                where = b.sext(b.load(at, typ=I32), I64)
                ptrs.append(b.load(b.gep(args, [where], inbounds=True, source_etype=PTR), typ=PTR))
                slot += 1
            if isinstance(step, Fill):
                self.fill(b, ptrs[0], step)
                continue
            nest_fn, _, k = by_step[id(step)]
            ptrs = self._advanced(b, k, ptrs)  # (the signature's offsets: every repetition's)
            lo, hi = (I64(x) for x in (step.attrs.range or (0, 0, 1))[:2])
            b.call(nest_fn, ptrs + [lo, hi] + [ir.Constant(PTR, None)] * (step.attrs.gemm is not None))
        nxt = b.add(r, I64(1))
        r.add_incoming(nxt, b.block)
        b.cbranch(b.icmp_signed("<", nxt, I64(len(rows))), body, done)
        b.position_at_end(done)
        b.ret_void()
        return fn

    def _steps(self, b: ir.IRBuilder, args: ir.Value, nthreads: ir.Value, steps, ptrs, by_step: dict) -> None:
        """The calls and fills of ``steps``; ``ptrs[k]``: the ``k``-th buffer's pointer."""
        region = None  # the parallel loops' {args, next, team, chunk} (P_omp), one for them all
        for step in steps:
            if isinstance(step, Fill):
                ptr = ptrs[self.arg_index[step.buffer.tensor]]
                fill_fn = self.fill_fns.get(id(step))
                if fill_fn is None:
                    self.fill(b, ptr, step)
                    continue
                gomp = declare(self.module, "GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
                with b.if_else(b.icmp_signed(">", nthreads, I32(1))) as (par, ser):
                    with par:
                        b.call(gomp, [fill_fn, args, nthreads, I32(0)])
                    with ser:
                        self.fill(b, ptr, step)
                continue
            nest_fn, omp, k = by_step[id(step)]
            own = self._advanced(b, k, [ptrs[p] for p in self.params[k]])
            lo, hi = (I64(x) for x in (step.attrs.range or (0, 0, 1))[:2])
            serial = own + [lo, hi] + [ir.Constant(PTR, None)] * (step.attrs.gemm is not None)
            cell = ptrs[self.arg_index[self.program.inputs[-1].tensor]] if step.attrs.first_block else None
            flag = None if cell is None else b.load(b.gep(cell, [I64(1)], source_etype=I64), typ=I64)
            with contextlib.nullcontext() if flag is None else b.if_then(b.icmp_signed("!=", flag, I64(0))):
                if omp is None:
                    b.call(nest_fn, serial)
                else:
                    if region is None:
                        with b.goto_entry_block():
                            region = b.alloca(I64, size=I64(4), name="region")
                    gomp = declare(self.module, "GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
                    with b.if_else(b.icmp_signed(">", nthreads, I32(1))) as (par, ser):
                        with par:
                            team = b.sext(nthreads, I64)
                            for field, value in enumerate((b.ptrtoint(args, I64), I64(0), team,
                                                           self.chunk_size(b, step, team, ptrs))):
                                b.store(value, region_field(b, region, field))
                            b.call(gomp, [omp, region, nthreads, I32(0)])
                        with ser:
                            b.call(nest_fn, serial)
            if self.checks is not None:  # stop at the first nest that recorded a violation
                with b.if_then(self.checks.failed(b, ptrs[self.nptr - 1]), likely=False):
                    b.ret_void()

    def fill_function(self, k: int, step: Fill) -> ir.Function:
        """``P_fill<k>(ptr args)``: thread ``t`` of ``T`` fills the ``t``-th of ``T`` whole-page chunks."""
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), f"{self.prefix}_fill{k}")
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        slot = b.gep(fn.args[0], [I64(self.arg_index[step.buffer.tensor])], inbounds=True, source_etype=PTR)
        ptr = b.load(slot, typ=PTR)
        tid = b.sext(b.call(declare(self.module, "omp_get_thread_num", I32, []), []), I64)
        nt = b.sext(b.call(declare(self.module, "omp_get_num_threads", I32, []), []), I64)
        n = step.buffer.size
        grain = max(1, self._target().page // step.buffer.itemsize)
        share = b.sdiv(b.add(I64(n), b.sub(nt, I64(1))), nt)
        chunk = b.mul(b.sdiv(b.add(share, I64(grain - 1)), I64(grain)), I64(grain))
        lo = b.call(declare(self.module, "llvm.smin.i64", I64, [I64, I64]), [b.mul(tid, chunk), I64(n)])
        hi = b.call(declare(self.module, "llvm.smin.i64", I64, [I64, I64]), [b.add(lo, chunk), I64(n)])
        with b.if_then(b.icmp_signed("<", lo, hi)):
            self.fill(b, ptr, step, lo, hi)
        b.ret_void()
        return fn

    def fill(self, b: ir.IRBuilder, ptr: ir.Value, step: Fill, lo: ir.Value | None = None,
             hi: ir.Value | None = None) -> None:
        """Fill the buffer's elements ``[lo, hi)`` (all of them by default; a given range is not empty)."""
        buf = step.buffer
        if buf.size == 0:
            return
        lo = I64(0) if lo is None else lo
        hi = I64(buf.size) if hi is None else hi
        v = step.value
        t = MEMTYPE[buf.dtype]
        if v.op is Op.CONST and not v.arg:
            size = buf.itemsize
            memset = declare(self.module, "llvm.memset.p0.i64", ir.VoidType(), [PTR, I8, I64, I1])
            start = b.gep(ptr, [b.mul(lo, I64(size))], inbounds=True, source_etype=I8)
            b.call(memset, [start, I8(0), b.mul(b.sub(hi, lo), I64(size)), I1(0)])
            return
        val = t(int(bool(v.arg))) if buf.dtype == "bool" else const_value(buf.dtype, v.arg)
        pre = b.block
        body = b.append_basic_block("fill.body")
        done = b.append_basic_block("fill.exit")
        b.branch(body)
        b.position_at_end(body)
        i = b.phi(I64)
        i.add_incoming(lo, pre)
        b.store(val, b.gep(ptr, [i], inbounds=True, source_etype=t))
        nxt = b.add(i, I64(1))
        i.add_incoming(nxt, body)
        b.cbranch(b.icmp_signed("<", nxt, hi), body, done)
        b.position_at_end(done)


def region_field(b: ir.IRBuilder, region: ir.Value, field: int) -> ir.Value:
    """The address of a parallel loop's region field (``i64``s: 0 the pointer array, 1 the next
    chunk, 2 the team's size, 3 the trips of a chunk; see ``P_omp``)."""
    return b.gep(region, [I64(field)], inbounds=True, source_etype=I64)


class _LazyPointers:
    """``[k]``: the ``k``-th buffer's pointer, loaded from the pointer array where first asked
    for (at the builder's position, so before any branch that uses it)."""

    def __init__(self, b: ir.IRBuilder, args: ir.Value) -> None:
        self.b, self.args, self.loaded = b, args, {}

    def __getitem__(self, k: int) -> ir.Value:
        found = self.loaded.get(k)
        if found is None:
            slot = self.b.gep(self.args, [I64(k)], inbounds=True, source_etype=PTR)
            found = self.loaded[k] = self.b.load(slot, typ=PTR)
        return found

def _loop_blocks(body: ir.Block, exit_: ir.Block) -> list[ir.Block]:
    """The blocks of the loop being emitted whose body starts at ``body``: that block, and all
    those appended after its ``exit_`` block (appended before the body was emitted)."""
    blocks = body.function.blocks
    return [body, *blocks[blocks.index(exit_) + 1:]]
