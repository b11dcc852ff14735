"""Contractions (:mod:`.gemm.contraction`) as calls into the packed matrix-product library, whose driver
runs ``C[m, n] = sum_k A(m, k) * B(k, n)`` BLIS-style for each batch point (:mod:`.gemm.library`).

A nest only fills a descriptor (:mod:`.gemm.descriptor`) and calls the driver; a side that is not a plain
linear read gets a packing function of its own in the kernel (:mod:`.gemm.packing`), or where it computes
values read along the sum, a function of the panel rows that the library's staging packer calls.  ``lower``
prints and counts the plain loop nest.  ``fastmath=False`` does not use it: blocking over ``k``
reassociates sums."""

from __future__ import annotations

import llvmlite.ir as ir

from tensorad.ir.expr import Op, var
from tensorad.ir.rewrite import free_vars, walk
from tensorad.ir.tensor import Tensor

from ..llvm.expr import ExprEmitter
from ..llvm.ir_loops import declare, for_range
from . import descriptor as gd
from . import library as gemmlib
from .contraction import Contraction, a_packed_once, b_packed_once
from .pack_routines import entry_alloca, new_function, smin
from .packing import Packer, pushed, staged

I1, I64 = ir.IntType(1), ir.IntType(64)
PTR = ir.PointerType()
# fix(ctx, cbase, bflat, jc, ncl, r0, r1), and its finisher and repairer: rows [r0, r1) of a column block
_FIX_ARGS = (PTR, PTR, I64, I64, I64, I64, I64)
SIZES = 1  # a fixer's ctx starts with the product's K (its sum, as it runs)


def packs_a_once(s: Contraction) -> bool:
    """Whether side A is packed once per call (:func:`.gemm.contraction.a_packed_once`), not per block."""
    return a_packed_once(s, s.mr)


KEEP_TILES = 1  # more row tiles than this: the first packs B's panels for the others (keeps_b_panels)


def reads_b_in_place(s: Contraction, plan: gd.SidePlan | None) -> int:
    """The distance of B's rows (elements) when the driver reads side B in place rather than packing it
    first, else 0; the first row tile then packs the panels for the others as :func:`keeps_b_panels` says.  B
    must be a plain unbatched read, its columns one run and ``k`` one stride, in a product with no band."""
    if (plan is None or plan.mode != gd.COPY or plan.fields[gd.S_NCHK] or s.band is not None
            or set(free_vars(s.b)) & set(s.batch) or b_packed_once(s) or s.packed_b is not None):
        return 0
    n_coefs = [plan.fields[gd.axis_field(gd.OUTER, i, 1)] for i in range(len(s.n))]
    k_coefs = [plan.fields[gd.axis_field(gd.KGROUP, i, 1)] for i in range(len(s.k))]
    ldb = k_coefs[-1]
    if ldb < 1 or gd.runs(s.n, n_coefs) != s.N or gd.runs(s.k, k_coefs, ldb) != s.K:
        return 0
    return ldb


def keeps_b_panels(s: Contraction) -> bool:
    """Whether the first row tile packs the panels of B it reads in place for the row tiles after it, which
    then read the packed panel from L1 (``KC`` short: :func:`.gemm.contraction.cache_blocks`) rather than
    B's rows again, which lie a row of B apart: a page apart (1024 float32 columns) they share few sets."""
    return -(-s.M // s.mr) > KEEP_TILES


def row_points(b: ir.IRBuilder, s: Contraction, ptr_of, strides_of) -> ir.Value:
    """The points of the group of a product over a generic kernel's rows (:attr:`.Contraction.rows`)
    below the count of rows, read when the kernel runs."""
    em = ExprEmitter(b, ptr_of, strides_of, (), target=s.target)
    return b.mul(em.index(s.rows.count), I64(s.rows.extent(s)))


def row_blocks(b: ir.IRBuilder, s: Contraction, ptr_of, strides_of) -> ir.Value | None:
    """The blocks of the parallel range that a product whose batch or columns are a generic kernel's rows
    runs, those below the count (``None``: another product's, all)."""
    if s.rows is None or s.rows.group not in (gd.BATCH, gd.COLUMNS):
        return None
    points = row_points(b, s, ptr_of, strides_of)
    if s.rows.group == gd.BATCH:
        return b.mul(points, I64(s.blocks // s.batches))
    return b.mul(b.sdiv(b.add(points, I64(s.nc - 1)), I64(s.nc)), I64(s.batches))


class GemmEmitter:
    """Emits the body of a nest function (``ptrs..., lo, hi, shared``) for one :class:`Contraction`."""

    def __init__(self, module: ir.Module, spec: Contraction, name: str) -> None:
        self.m = module
        self.s = spec
        self.name = name
        self.t = ir.FloatType() if spec.dtype == "float32" else ir.DoubleType()
        self.es = 4 if spec.dtype == "float32" else 8
        self.vw = gd.panel_lanes(spec.target.lanes(spec.dtype), spec.nr)

    def emit(self, b: ir.IRBuilder, ptr_of, strides_of, lo: ir.Value, hi: ir.Value, fastmath=(),
             shared: ir.Value | None = None) -> None:
        """The descriptor and the driver's call for blocks ``[lo, hi)``; ``shared``: the
        parallel loop's schedule (:data:`.gemm.descriptor.H_SHARED`; null: all of ``[lo, hi)``).  A
        product over a generic kernel's rows (:attr:`.Contraction.rows`) runs the count of them read here:
        as its ``M`` or ``K``, which the driver and the fixer read, or as its batch points, its blocks
        ``[lo, hi)`` cut at the last one's."""
        s = self.s
        if len(s.batch) > gd.MAXBATCH:
            raise RuntimeError(f"internal: a matrix product with {len(s.batch)} batch axes (at "
                               f"most {gd.MAXBATCH}) reached the library (contraction.worth_it)")
        pack_ty = [PTR, PTR, I64, I64, I64, I64, I64, PTR]
        fields = {gd.H_M: s.M, gd.H_N: s.N, gd.H_K: s.K, gd.H_KC: s.kc, gd.H_MC: s.mc, gd.H_NC: s.nc,
                  gd.H_NJC: s.blocks // s.batches, gd.H_NB: len(s.batch), gd.H_PARTS: s.row_parts,
                  gd.H_PART_ROWS: s.part_rows}
        fields[gd.H_APRE] = int(packs_a_once(s))
        fields[gd.H_BPRE] = int(b_packed_once(s))
        if s.band is not None:
            fields[gd.H_BAND_LO_ON], fields[gd.H_BAND_LO] = int(s.band.lo is not None), s.band.lo or 0
            fields[gd.H_BAND_HI_ON], fields[gd.H_BAND_HI] = int(s.band.hi is not None), s.band.hi or 0
            fields[gd.H_BAND_INNER] = s.band.inner
        # (an epilogue's consumer: C's shape, row-major)
        cstride, c_first = s.c_layout(strides_of(self.c_tensor))
        fields[gd.H_LDC] = cstride[s.m[-1]]  # (the rows' strides chain)
        for i, ax in enumerate(s.batch):
            fields[gd.H_BEXT + i] = ax.extent
            fields[gd.H_CCOEF + i] = cstride[ax]
        sides = []
        for at, expr, outer, width in ((gd.SIDE_A, s.a, s.m, s.mr), (gd.SIDE_B, s.b, s.n, s.nr)):
            plan = gd.plan_side(expr, s.batch, outer, s.k, strides_of, width, self.vw)
            if plan is not None:
                fields.update({at + f: v for f, v in plan.fields.items()})
            sides.append((at, expr, outer, width, plan))
        fields[gd.H_BDIRECT] = reads_b_in_place(s, sides[1][4])
        fields[gd.H_BKEEP] = int(keeps_b_panels(s))
        fields[gd.H_ACC] = int(s.accumulate)
        fields[gd.H_BFILL] = int(s.packed_b is not None and s.packed_b.fills)
        # the constant part of the descriptor is a global; the pointers are stored per call
        template = ir.GlobalVariable(self.m, ir.ArrayType(I64, gd.DESC_LEN), f"{self.name}_desc")
        template.linkage = "private"
        template.global_constant = True
        template.initializer = ir.FormattedConstant(ir.ArrayType(I64, gd.DESC_LEN), "[" + ", ".join(
            f"i64 {int(fields.get(i, 0))}" for i in range(gd.DESC_LEN)) + "]")  # (a constant per field: 1 ms)
        desc = b.alloca(I64, size=I64(gd.DESC_LEN), name="desc")
        memcpy = declare(self.m, "llvm.memcpy.p0.p0.i64", ir.VoidType(), [PTR, PTR, I64, I1])
        b.call(memcpy, [desc, template, I64(gd.DESC_LEN * 8), I1(0)])

        def put(at: int, ptr: ir.Value) -> None:
            slot = b.gep(desc, [I64(at)], inbounds=True, source_etype=I64)
            b.store(ptr if ptr.type == I64 else b.ptrtoint(ptr, I64), slot)

        sizes = [I64(s.K)]
        if s.rows is not None:
            points = row_points(b, s, ptr_of, strides_of)
            if s.rows.group == gd.COLUMNS:  # (the driver reads N and the column blocks per batch point)
                put(gd.H_N, points)
                put(gd.H_NJC, b.sdiv(b.add(points, I64(s.nc - 1)), I64(s.nc)))
            if s.rows.group in (gd.BATCH, gd.COLUMNS):
                hi = smin(b, hi, row_blocks(b, s, ptr_of, strides_of))
            else:
                if s.rows.group == gd.KGROUP:
                    sizes[0] = points
                put(gd.H_K if s.rows.group == gd.KGROUP else gd.H_M, points)

        cptr = ptr_of(self.c_tensor)
        put(gd.H_C, b.gep(cptr, [I64(c_first)], inbounds=True, source_etype=self.t) if c_first else cptr)
        for at, expr, outer, width, plan in sides:
            if plan is not None:
                put(at + gd.S_BASE, ptr_of(plan.tensor))
                symbol = gemmlib.pack_symbol(s.dtype, s.mr, s.nr, "A" if at == gd.SIDE_A else "B", plan.mode,
                                             s.target)
                put(at + gd.S_FN, declare(self.m, symbol, ir.VoidType(), pack_ty))
                continue
            # a side of its own: the packing function reads its tensors' pointers from ctx
            tensors, ctx = self._context(b, expr, ptr_of, ())
            side = "A" if at == gd.SIDE_A else "B"
            fn, by_rows = self._own_packer(f"{self.name}_pack{side}", expr, outer, width, tensors, strides_of,
                                           fastmath)
            if by_rows:  # (the library's routine packs the rows the kernel's function computes)
                put(at + gd.S_ROW, fn)
                fn = declare(self.m, gemmlib.pack_symbol(s.dtype, s.mr, s.nr, side, gd.STAGED, s.target),
                             ir.VoidType(), pack_ty)
            put(at + gd.S_FN, fn)
            put(at + gd.S_CTX, ctx)
        if s.epilogue is not None or s.exact is not None:
            fix, ctx = (self._finisher(b, ptr_of, strides_of, fastmath, fields[gd.H_LDC], sizes)
                        if s.epilogue is not None else self._fixer(b, ptr_of, strides_of, fastmath, sizes))
            put(gd.H_FIX, fix)
            put(gd.H_FIXCTX, ctx)
        if shared is not None:
            put(gd.H_SHARED, shared)
        if s.packed_b is not None:
            put(gd.H_BSHARED, ptr_of(s.packed_b.tensor))
        driver = gemmlib.driver_symbol(s.dtype, s.mr, s.nr, s.target)
        b.call(declare(self.m, driver, ir.VoidType(), [PTR, I64, I64]), [desc, lo, hi])

    def tensors(self) -> list[Tensor]:
        """The tensors whose buffers the emitted code reads or writes, in first-use order: C's, then
        those the sides, the exact term and the epilogue read."""
        s = self.s
        exprs = [s.a, s.b, *(e for e in (s.exact, s.rows and s.rows.count) if e is not None)]
        if s.epilogue is not None:
            exprs.append(s.epilogue.apply(s.c_at, var(f"{s.c.op.name}.value", dtype=s.dtype)))
        reads = (n.arg for e in exprs for n in walk(e) if n.op is Op.READ)
        packed = [s.packed_b.tensor] if s.packed_b is not None else []
        return list(dict.fromkeys([self.c_tensor, *reads, *packed]))

    @property
    def c_tensor(self) -> Tensor:
        """The tensor whose buffer holds C: the product's own, or its epilogue's consumer's."""
        return Tensor(self.s.epilogue.consumer, 0) if self.s.epilogue is not None else self.s.c

    def _finisher(self, b: ir.IRBuilder, ptr_of, strides_of, fastmath, ldc: int, sizes: list
                  ) -> tuple[ir.Function, ir.Value]:
        """``fix(ctx, cbase, bflat, jc, ncl, r0, r1)`` and its ``ctx`` (``sizes``, then :meth:`_fixer`'s,
        then the epilogue's tensors) for a product with an epilogue: :meth:`_fixer`'s NaN repair, then each
        element of the finished block's rows ``[r0, r1)`` replaced by the consumer's value there (a
        unit-stride loop along the last column axis: one loop of masked vectors where the target has them,
        else whole vectors then a scalar loop of the rest: beside LLVM's own scalar remainder, the vector
        loop loads more of the consumer's constants again on each iteration).  ``cbase`` is ``noalias``: the
        nest that calls it takes C's buffer and the epilogue's as ``noalias`` arguments, so LLVM vectorizes
        without run-time overlap checks."""
        s = self.s
        value = var(f"{s.c.op.name}.value", dtype=s.dtype)
        expr = s.epilogue.apply(s.c_at, value)
        exact = self._fixer(b, ptr_of, strides_of, fastmath, sizes) if s.exact is not None else None
        tensors, ctx = self._context(b, expr, ptr_of, [*sizes, exact[1] if exact else ir.Constant(PTR, None)])
        fn, f = new_function(self.m, f"{self.name}_finish", _FIX_ARGS, attrs=("nounwind",))
        fctx, cbase, bflat, jc, ncl, r0, r1 = fn.args
        cbase.add_attribute("noalias")
        masked = s.target.masked_memory
        if exact is not None:
            f.call(exact[0], [_slot(f, fctx, SIZES), cbase, bflat, jc, ncl, r0, r1])
        em, digits = self._emitter(f, fctx, SIZES + 1, tensors, strides_of, fastmath, bflat, expr)
        with for_range(f, r0, r1, name="em", vectorize=False) as m, \
                pushed(em):
            digits.bind(s.m, m)
            row = f.gep(cbase, [f.add(f.mul(m, I64(ldc)), jc)], inbounds=True, source_etype=self.t)

            def run(pos, seglen, first):
                def part(lo, hi, name, **how):
                    with for_range(f, lo, hi, name=name, **how) as j, pushed(em):
                        em.env[s.n[-1]] = f.add(first, j)
                        at = f.gep(row, [f.add(pos, j)], inbounds=True, source_etype=self.t)
                        em.env[value] = f.load(at, typ=self.t)
                        f.store(em.value(expr), at)
                whole = seglen if masked else f.and_(seglen, I64(-self.vw))
                part(I64(0), whole, "en", masked_tail=masked)
                if not masked:
                    part(whole, seglen, "er", vectorize=False)
            digits.runs(s.n, jc, ncl, run)
        f.ret_void()
        return fn, ctx

    def _context(self, b: ir.IRBuilder, expr, ptr_of, head) -> tuple[list, ir.Value]:
        """The tensors ``expr`` reads and an array of ``head`` (pointers, or ``i64`` values stored as
        pointers) then their pointers (a function's ``ctx``)."""
        tensors = list(dict.fromkeys(n.arg for n in walk(expr) if n.op is Op.READ))
        ctx = b.alloca(PTR, size=I64(max(1, len(head) + len(tensors))), name="ctx")
        values = [b.inttoptr(v, PTR) if v.type == I64 else v for v in head] + [ptr_of(t) for t in tensors]
        for i, v in enumerate(values):
            b.store(v, b.gep(ctx, [I64(i)], inbounds=True, source_etype=PTR))
        return tensors, ctx

    def _fixer(self, b: ir.IRBuilder, ptr_of, strides_of, fastmath, sizes: list
               ) -> tuple[ir.Function, ir.Value]:
        """``fix(ctx, cbase, bflat, jc, ncl, r0, r1)`` and its ``ctx`` (``sizes``, then the exact term's
        tensors): a complete block of C (batch point ``bflat``, columns ``[jc, jc + ncl)``, rows ``[r0,
        r1)``) scanned for NaN (the library's :func:`.gemm.library.emit_nan_scan`), repaired if it has one."""
        s = self.s
        tensors, ctx = self._context(b, s.exact, ptr_of, sizes)
        fn, f = new_function(self.m, f"{self.name}_fix", _FIX_ARGS, attrs=("nounwind",))
        repair = self._repairer(tensors, strides_of, fastmath)
        ldc = s.c_layout(strides_of(self.c_tensor))[0][s.m[-1]]
        fctx, cbase, bflat, jc, ncl, r0, r1 = fn.args
        block = f.gep(cbase, [f.add(f.mul(r0, I64(ldc)), jc)], inbounds=True, source_etype=self.t)
        scan = declare(self.m, gemmlib.prefix(s.dtype, s.mr, s.nr, s.target) + "_nanscan", I1,
                       [PTR, I64, I64, I64])
        with f.if_then(f.call(scan, [block, I64(ldc), f.sub(r1, r0), ncl])):
            f.call(repair, [fctx, cbase, bflat, jc, ncl, r0, r1])
        f.ret_void()
        return fn, ctx

    def _repairer(self, tensors: list, strides_of, fastmath) -> ir.Function:
        """``repair(ctx, cbase, bflat, jc, ncl, r0, r1)``: each NaN element of a block of C recomputed as
        the sum of :attr:`.Contraction.exact` over ``k`` in order, ending at its first NaN.  Cold code,
        compiled ``optnone`` as the glue is (:data:`.llvm.emit.GLUE_OPT_LIMIT`)."""
        s = self.s
        fn, f = new_function(self.m, f"{self.name}_repair", _FIX_ARGS,
                             attrs=("nounwind", "cold", "noinline", "optnone"))
        fctx, cbase, bflat, jc, ncl, r0, r1 = fn.args
        em, digits = self._emitter(f, fctx, SIZES, tensors, strides_of, fastmath, bflat, s.exact)
        ldc = s.c_layout(strides_of(self.c_tensor))[0][s.m[-1]]
        acc = entry_alloca(f, self.t, "acc")
        kpos = entry_alloca(f, I64, "k")
        terms = f.ptrtoint(_slot(f, fctx, 0), I64)
        with for_range(f, r0, r1, name="fm", vectorize=False) as m, pushed(em):
            digits.bind(s.m, m)
            row = f.gep(cbase, [f.add(f.mul(m, I64(ldc)), jc)], inbounds=True, source_etype=self.t)
            with for_range(f, 0, ncl, name="fn", vectorize=False) as j:
                at = f.gep(row, [j], inbounds=True, source_etype=self.t)
                v = f.load(at, typ=self.t)
                with f.if_then(f.fcmp_unordered("uno", v, v)), pushed(em):
                    digits.bind(s.n, f.add(jc, j))
                    f.store(self.t(0.0), acc)
                    f.store(I64(0), kpos)
                    head, body, done = (fn.append_basic_block(f"fk.{x}") for x in ("head", "in", "done"))
                    f.branch(head)
                    f.position_at_end(head)  # a NaN sum stays NaN: the loop ends at one
                    kk, total = f.load(kpos, typ=I64), f.load(acc, typ=self.t)
                    more = f.and_(f.icmp_signed("<", kk, terms), f.fcmp_ordered("ord", total, total))
                    f.cbranch(more, body, done)
                    f.position_at_end(body)
                    with pushed(em):
                        digits.bind(s.k, kk)
                        f.store(f.fadd(f.load(acc, typ=self.t), em.value(s.exact)), acc)
                    f.store(f.add(kk, I64(1)), kpos)
                    f.branch(head)
                    f.position_at_end(done)
                    f.store(f.load(acc, typ=self.t), at)
        f.ret_void()
        return fn

    def _own_packer(self, name: str, expr, outer, width, tensors, strides_of, fastmath
                    ) -> tuple[ir.Function, bool]:
        """``pack(side, dst, bflat, o0, olen, k0, klen, scratch)`` for one side, by the expression emitter,
        or (True) where the library's staging routine packs the side (:func:`.gemm.packing.staged`),
        the ``rows(side, bflat, o, nrows, k, count, out)`` it calls (:meth:`.gemm.packing.Packer.rows`)."""
        rows = staged(expr, self.s.k, outer, width, self.vw, strides_of)
        fn, b = new_function(self.m, name + "_row" * rows, [PTR, *[I64] * 5, PTR] if rows else
                             [PTR, PTR, I64, I64, I64, I64, I64, PTR], attrs=("nounwind",))
        fn.args[-1 if rows else 1].add_attribute("noalias")
        side, *args = fn.args
        ctx = b.inttoptr(b.load(b.gep(side, [I64(gd.S_CTX)], inbounds=True, source_etype=I64), typ=I64), PTR)
        _, packer = self._emitter(b, ctx, 0, tensors, strides_of, fastmath, args[0 if rows else 1], expr)
        if rows:  # (o, nrows, k, count, out)
            packer.rows(expr, outer, *args[1:])
        else:  # (dst, bflat, o0, olen, k0, klen, scratch)
            packer.pack(args[0], expr, outer, args[2], args[3], width, args[4], args[5])
        b.ret_void()
        return fn, rows

    def _emitter(self, f: ir.IRBuilder, ctx: ir.Value, first: int, tensors: list, strides_of, fastmath,
                 bflat: ir.Value, expr) -> tuple[ExprEmitter, Packer]:
        """An expression emitter reading the pointers of ``tensors`` from ``ctx[first:]`` (half: F16C), and
        a packer over ``k`` with the batch axes ``expr`` reads bound to the batch point ``bflat``."""
        ptrs = {t: f.load(f.gep(ctx, [I64(i + first)], inbounds=True, source_etype=PTR), typ=PTR)
                for i, t in enumerate(tensors)}
        em = ExprEmitter(f, lambda t: ptrs[t], strides_of, fastmath, target=self.s.target)
        packer = Packer(f, em, self.s.k, self.t, self.vw, self.s.target.masked_memory)
        if self.s.batch:
            packer.bind(self.s.batch, bflat, set(free_vars(expr)))
        return em, packer


def _slot(b: ir.IRBuilder, ctx: ir.Value, k: int) -> ir.Value:
    """Entry ``k`` of a fixer's ``ctx`` (:meth:`GemmEmitter._context`)."""
    return b.load(b.gep(ctx, [I64(k)], inbounds=True, source_etype=PTR), typ=PTR)
