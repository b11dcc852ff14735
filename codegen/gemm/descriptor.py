"""The descriptor of one contraction, read at run time by the generic matrix-product library.

A contraction nest fills a descriptor, a flat ``i64`` array, and calls the library's driver.  Each side
(A: rows ``m``, B: columns ``n``) is a read whose address is linear in the *digits* (``value - lo``) of
three row-major axis groups (batch, the side's outer axes, ``k``),
``base + const + sum_axis coef[axis] * digit(axis)``, optionally guarded by range checks
``0 <= chk_const[d] + sum coef_d * digit < size[d]`` (padding); another side gets a packing function in
the kernel.  The packing modes, chosen here: ``TRANSPOSE`` (contiguous along ``k``), ``TRANSPOSE2`` (stride
2 along ``k``), ``COPY``/``COPY2`` (contiguous or stride 2 along the outer axes), ``GATHER``; ``STAGED``
(chosen by the kernel): a computed side whose rows the kernel's row function writes, then transposed."""

from __future__ import annotations

from dataclasses import dataclass

from tensorad.ir.expr import Expr, Op, compare, const, logical
from tensorad.poly.affine import IndexSpace, NotAffine
from tensorad.poly.linear import var_coefficients

MAXAX = 6  # axes per group of a side (more: the side gets its own packing function)
MAXBATCH = 16  # batch axes of the product
MAXCHK = 4  # range-checked indices per side
AX_LEN = 2 + MAXCHK  # extent, address coefficient, checked-index coefficients
GROUP_LEN = 1 + MAXAX * AX_LEN  # number of axes, then the axes
BATCH, OUTER, KGROUP = 0, 1, 2
COLUMNS = 3  # (not a side's group: a product's columns, as :class:`.contraction.RowCount` names them)

# fields of a side
S_BASE, S_FN, S_CTX, S_MODE, S_CONST, S_NCHK = range(6)
S_ROW = S_BASE  # a side the library stages (``STAGED``, no base of its own): the kernel's row function
S_CHKSIZE = 6
S_CHKCONST = S_CHKSIZE + MAXCHK
S_CHKSTEP = S_CHKCONST + MAXCHK  # per checked index: its step along the last outer axis
S_GROUPS = S_CHKSTEP + MAXCHK
SIDE_LEN = S_GROUPS + 3 * GROUP_LEN

# fields of the header
H_M, H_N, H_K, H_KC, H_MC, H_NC, H_LDC, H_NJC, H_C, H_NB = range(10)  # (H_NJC: blocks per batch point)
H_BEXT = 10  # batch extents
H_CCOEF = H_BEXT + MAXBATCH  # C's element strides along the batch axes
SIDE_A = H_CCOEF + MAXBATCH
SIDE_B = SIDE_A + SIDE_LEN
H_APRE = SIDE_B + SIDE_LEN  # 1: side A reads no batch axis (packed once per call, see gemmlib)
H_BPRE = H_APRE + 1  # 1: side B reads no batch axis (packed once per call, see gemmlib)
# the shared schedule ``{i64 next, i64 team, i64 chunk}`` (0: the call runs ``[lo, hi)``)
H_SHARED = H_BPRE + 1
# the kernel's fixer ``fix(ctx, cbase, bflat, jc, ncl)`` and its tensors (0: none)
H_FIX = H_SHARED + 1
H_FIXCTX = H_FIX + 1
# side A's band (contraction.Band): bound flags, constants, and the inner reduction extent
H_BAND_LO_ON = H_FIXCTX + 1
H_BAND_LO = H_BAND_LO_ON + 1
H_BAND_HI_ON = H_BAND_LO + 1
H_BAND_HI = H_BAND_HI_ON + 1
H_BAND_INNER = H_BAND_HI + 1
# side B read in place (a plain read, contiguous along its columns, unpacked): the distance of
# its rows (k) in elements; 0: B is packed (see gemmlib's driver and microkernel.reads_b_in_place)
H_BDIRECT = H_BAND_INNER + 1
# with B read in place, 1: the first row tile's micro-kernel packs B's panels as it reads them
# and the other row tiles read them packed; 0: every row tile reads B in place
H_BKEEP = H_BDIRECT + 1
# 1: C holds a partial sum already (a later chunk of the reduction, see contraction.pad_contraction):
# every ``k`` block adds to it; 0: the first ``k`` block stores
H_ACC = H_BKEEP + 1
# side B's packed copy in a buffer of the kernel that other products read too (0: none), laid out as a
# side packed once per call; with ``H_BFILL`` 1 the call packs the column blocks it runs into it, else it
# reads them packed by an earlier product (:mod:`..passes.shared_packing`)
H_BSHARED = H_ACC + 1
H_BFILL = H_BSHARED + 1
# the parts of the rows (``Contraction.row_parts``) and the rows of each: block ``pb`` of the parallel loop
# runs part ``pb % H_PARTS`` of batch point ``pb // H_NJC``'s column block ``pb % H_NJC // H_PARTS``
H_PARTS = H_BFILL + 1
H_PART_ROWS = H_PARTS + 1
DESC_LEN = H_PART_ROWS + 1
APRE_LIMIT = 4 << 20  # bytes of a side packed once per call

TRANSPOSE, COPY, GATHER, TRANSPOSE2, COPY2, STAGED = 0, 1, 2, 3, 4, 5


def group_base(g: int) -> int:
    """Offset (in a side) of group ``g``'s axis count; its axes follow."""
    return S_GROUPS + g * GROUP_LEN


def axis_field(g: int, ax: int, f: int) -> int:
    """Offset (in a side) of field ``f`` (0 extent, 1 coefficient, 2 + d checked index d)."""
    return group_base(g) + 1 + ax * AX_LEN + f


NARROW_LANES = 4  # the fewest lanes of a micro-kernel's vectors (a 16-byte vector of float32)


def panel_lanes(lanes: int, nr: int) -> int:
    """The lanes of the vectors of a micro-kernel ``NR`` columns wide, where the target's vectors have
    ``lanes``: one narrower vector for a panel narrower than the target's."""
    return min(lanes, nr)


def block_size(width: int, vw: int) -> int:
    """Rows per register transpose for panels of ``width`` with ``vw``-lane vectors: the largest of ``vw``,
    ``vw/2``, ``vw/4`` (at least 4) dividing ``width``, else 2 for an even width (6 rows); 0: none."""
    return next((n for n in (vw, vw // 2, vw // 4) if n >= 4 and width % n == 0), 2 * (width % 2 == 0))


@dataclass
class SidePlan:
    """A side the library packs by itself: the tensor read and the integer fields."""

    tensor: object
    mode: int
    fields: dict[int, int]  # side field offset -> value (the base pointer is filled at run time)


def runs(axes, coefs, stride: int = 1) -> int:
    """Length of the run of addresses ``stride`` apart along the trailing axes (0: the last axis does not)."""
    if not axes or coefs[-1] != stride:
        return 0
    run = axes[-1].extent
    for a in range(len(axes) - 2, -1, -1):
        if coefs[a] != run * stride:
            break
        run *= axes[a].extent
    return run


def plan_side(expr: Expr, batch: tuple, outer: tuple, kaxes: tuple, strides_of, width: int,
              vw: int) -> SidePlan | None:
    """The library's description of one side, or ``None`` when it needs its own packer."""
    guard = None
    read = expr
    if expr.op is Op.IF_THEN_ELSE and expr.src[2].op is Op.CONST and expr.src[2].arg == 0:
        guard, read = expr.src[0], expr.src[1]
    if read.op is not Op.READ or read.dtype != expr.dtype:
        return None
    groups = (tuple(batch), tuple(outer), tuple(kaxes))
    axes = [a for g in groups for a in g]
    if any(len(g) > MAXAX for g in groups):
        return None
    strides = strides_of(read.arg)
    shape = read.arg.shape
    forms = []
    for idx in read.src:
        co = var_coefficients(idx)
        if co is None or any(v is not None and v not in axes for v in co):
            return None
        forms.append(co)
    # index d = off_d + sum_axis c_d[axis] * digit(axis)
    offs = [f.get(None, 0) + sum(c * v.lo for v, c in f.items() if v is not None) for f in forms]
    addr_const = sum(o * s for o, s in zip(offs, strides))
    coef = {a: sum(f.get(a, 0) * s for f, s in zip(forms, strides)) for a in axes}
    checked = []
    for d, f in enumerate(forms):
        lo = offs[d] + sum(min(0, f.get(a, 0) * (a.extent - 1)) for a in axes)
        hi = offs[d] + sum(max(0, f.get(a, 0) * (a.extent - 1)) for a in axes)
        if lo < 0 or hi >= shape[d]:
            checked.append(d)
    if checked and (guard is None or len(checked) > MAXCHK):
        return None
    if guard is not None and not _guard_is_range_check(guard, read, checked, axes):
        return None
    fields = {S_FN: 0, S_CTX: 0, S_CONST: addr_const, S_NCHK: len(checked)}
    o_last = outer[-1]
    for n, d in enumerate(checked):
        fields[S_CHKSIZE + n] = shape[d]
        fields[S_CHKCONST + n] = offs[d]
        step = forms[d].get(o_last, 0)
        if step not in (-1, 0, 1, 2):
            return None
        fields[S_CHKSTEP + n] = step
    for g, group in enumerate(groups):
        fields[group_base(g)] = len(group)
        for i, a in enumerate(group):
            fields[axis_field(g, i, 0)] = a.extent
            fields[axis_field(g, i, 1)] = coef[a]
            for n, d in enumerate(checked):
                fields[axis_field(g, i, 2 + n)] = forms[d].get(a, 0)
    run_k = runs(kaxes, [coef[a] for a in kaxes])
    run_o = runs(outer, [coef[a] for a in outer])
    k_steps = {forms[d].get(kaxes[-1], 0) for d in checked}
    o_steps = {fields[S_CHKSTEP + n] for n in range(len(checked))}
    run_o2 = runs(outer, [coef[a] for a in outer], 2)
    if vw >= 2 and run_o2 >= max(run_k + 1, vw) and o_steps <= {0, 2}:
        mode = COPY2  # every other element along the outer axes (a stride-2 convolution's windows)
    elif checked and run_k > run_o and block_size(width, vw) and k_steps <= {-1, 0, 1}:
        mode = TRANSPOSE  # contiguous along k: masked transposes (a weight gradient's input windows)
    elif coef[kaxes[-1]] == 2 and kaxes[-1].extent >= block_size(width, vw) > 0 \
            and runs(outer, [coef[a] for a in outer]) < kaxes[-1].extent and k_steps <= {0, 2}:
        mode = TRANSPOSE2  # every other element along k (a stride-2 convolution's weight gradient)
    elif checked:
        mode = COPY if coef[o_last] == 1 and o_steps <= {-1, 0, 1} else None
    elif run_k > run_o and run_k * 4 >= block_size(width, vw) > 0:
        mode = TRANSPOSE  # (a run shorter than a block is one masked block: a 13-wide window's rows)
    else:
        mode = COPY if coef[o_last] == 1 else GATHER
    if mode is None:
        return None
    fields[S_MODE] = mode
    return SidePlan(read.arg, mode, fields)


def _guard_is_range_check(guard: Expr, read: Expr, checked: list[int], axes: list) -> bool:
    """Whether ``guard`` holds exactly where the ``checked`` indices of ``read`` are in range
    (on the box of ``axes``): then packing may test the ranges instead of the guard."""
    space = IndexSpace(tuple(axes))
    claim = None
    for d in checked:
        idx = read.src[d]
        term = logical(Op.AND, compare(Op.GE, idx, const(0, idx.dtype)),
                       compare(Op.LT, idx, const(read.arg.shape[d], idx.dtype)))
        claim = term if claim is None else logical(Op.AND, claim, term)
    try:
        box = space.box()
        got = box.intersect(space.cond(guard))
        want = box.intersect(space.cond(claim)) if claim is not None else box
    except (NotAffine, NotImplementedError, ValueError):
        return False
    return got.is_equal(want)
