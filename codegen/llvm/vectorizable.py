"""Whether LLVM's loop vectorizer can take an innermost loop as emitted, so that a ``vector_width`` hint
goes only where it can be honoured: a hinted loop's every failure is an always-printed remark on stderr.

The test is conservative.  It reads the loop's LLVM IR, one basic block, and asks:

* no control flow inside the body, and every call to an LLVM intrinsic;
* every store to an accumulator slot is a reduction LLVM recognizes: loaded once, combined by one integer
  ``add``/``mul``/``and``/``or``/``xor`` or a float ``fadd``/``fmul`` with ``reassoc``;
* every other store's address is affine in the loop variable, through no loaded value, ``%``, ``//`` or
  select, and a buffer both stored and loaded is read only where it is written;
* a constant trip count is at least :data:`TINY_TRIPS`, counting up to :data:`PEEL_MAX` fewer for a loop
  that compares its induction variable (loop peeling)."""

from __future__ import annotations

import llvmlite.ir as ir

TINY_TRIPS = 16  # LLVM's TinyTripCountVectorThreshold
PEEL_MAX = 7  # LLVM's unroll-peel-max-count: the most iterations peeled to settle a compare
_AFFINE = frozenset({"add", "sub", "mul", "shl", "sext", "zext", "getelementptr"})
_INT_REDUCTIONS = frozenset({"add", "mul", "and", "or", "xor"})
_FLOAT_REDUCTIONS = frozenset({"fadd", "fmul"})


def vectorizable(body: ir.Block, latch: ir.Block, iv: ir.Value, slots, trips: int | None = None) -> bool:
    """Whether the innermost loop of ``body`` (induction variable ``iv``, back branch in ``latch``,
    ``trips`` its constant trip count) can take a width hint; ``slots``: its accumulator ``alloca``s."""
    if body is not latch:
        return False
    slots = set(map(id, slots))
    insts = [i for i in body.instructions if not isinstance(i, ir.Terminator)]
    inside = set(map(id, insts))
    if _tiny(trips, [body], body, iv, _Deps(inside)):
        return False
    slot_loads: dict[int, list] = {}
    stores, loads = [], []
    for i in insts:
        if isinstance(i, ir.CallInstr):
            callee = getattr(i.callee, "name", "")
            if not callee.startswith("llvm."):
                return False
        elif isinstance(i, ir.LoadInstr):
            ptr = i.operands[0]
            if id(ptr) in slots:
                slot_loads.setdefault(id(ptr), []).append(i)
            else:
                loads.append(i)
        elif isinstance(i, ir.StoreInstr):
            stores.append(i)
    deps = _Deps(inside)
    stored: dict[int, list] = {}
    for s in stores:
        value, ptr = s.operands
        if id(ptr) in slots:
            if not _reduction(value, slot_loads.get(id(ptr), [])):
                return False
            continue
        if not deps.reaches(ptr, iv) or not _affine(ptr, iv, deps):
            return False
        stored.setdefault(id(_base(ptr)), []).append(_key(ptr, inside))
    for ld in loads:
        ptr = ld.operands[0]
        written = stored.get(id(_base(ptr)))
        if written is not None and any(k != _key(ptr, inside) for k in written):
            return False
    return True


def _tiny(trips: int | None, blocks: list[ir.Block], exit_: ir.Block, iv: ir.Value, deps: _Deps) -> bool:
    """Whether LLVM may see fewer than :data:`TINY_TRIPS` iterations: a constant trip count below it, or
    within :data:`PEEL_MAX` of it when a compare (float ones too) other than the exit test reads ``iv``."""
    if trips is None:
        return False
    if trips < TINY_TRIPS:
        return True
    if trips >= TINY_TRIPS + PEEL_MAX:
        return False
    exits = {id(t.operands[0]) for bb in blocks for t in [bb.terminator]
             if isinstance(t, ir.ConditionalBranch) and any(o is exit_ for o in t.operands)}
    return any(isinstance(i, ir.instructions.CompareInstr) and id(i) not in exits and deps.reaches(i, iv)
               for bb in blocks for i in bb.instructions)


def _reduction(value, loads: list) -> bool:
    """``value`` is ``op(load slot, x)`` with ``op`` one LLVM reduces, that load the slot's only one."""
    if len(loads) != 1 or not isinstance(value, ir.Instruction):
        return False
    (load,) = loads
    if not any(op is load for op in value.operands):
        return False
    if value.opname in _INT_REDUCTIONS:
        return True
    return value.opname in _FLOAT_REDUCTIONS and "reassoc" in getattr(value, "flags", ())


def _affine(ptr, iv, deps: _Deps) -> bool:
    """Every value between ``iv`` and the address ``ptr`` is an affine operation (a loaded one is not)."""
    stack, seen = [ptr], set()
    while stack:
        x = stack.pop()
        if id(x) in seen or x is iv or not isinstance(x, ir.Instruction) or id(x) not in deps.inside:
            continue
        seen.add(id(x))
        if not deps.reaches(x, iv):
            continue
        if x.opname not in _AFFINE:
            return False
        stack.extend(x.operands)
    return True


def _base(ptr):
    """The pointer a chain of ``getelementptr``s starts from (a buffer parameter)."""
    while isinstance(ptr, ir.GEPInstr):
        ptr = ptr.pointer
    return ptr


def _key(v, inside: set, memo: dict | None = None):
    """A structural key of a value computed in the loop (two equal address computations
    emitted twice have one key); values from outside are themselves."""
    memo = {} if memo is None else memo
    if not isinstance(v, ir.Instruction) or id(v) not in inside or isinstance(v, ir.PhiInstr):
        return ("v", id(v))
    k = memo.get(id(v))
    if k is None:
        k = (v.opname, tuple(getattr(v, "flags", ())),
             tuple(_key(o, inside, memo) if isinstance(o, ir.Instruction) else
                   (str(o) if isinstance(o, ir.Constant) else ("v", id(o))) for o in v.operands))
        memo[id(v)] = k
    return k


class _Deps:
    """Which values a value computed in the loop depends on (transitively, inside the loop)."""

    def __init__(self, inside: set) -> None:
        self.inside = inside
        self.memo: dict[int, frozenset] = {}

    def sources(self, v) -> frozenset:
        key = id(v)
        if key in self.memo:
            return self.memo[key]
        seen, stack = {key}, [v]
        while stack:
            x = stack.pop()
            if not isinstance(x, ir.Instruction) or id(x) not in self.inside:
                continue
            for o in x.operands:
                if id(o) not in seen:
                    seen.add(id(o))
                    stack.append(o)
        self.memo[key] = frozenset(seen)
        return self.memo[key]

    def reaches(self, v, source) -> bool:
        return id(source) in self.sources(v)


def loop_blocks_widenable(blocks: list[ir.Block], exit_: ir.Block, iv: ir.Value,
                          trips: int | None = None) -> bool:
    """For a loop asked to vectorize after LLVM unrolls its inner loops
    (:func:`codegen.llvm.unrolled_chains.window_vector_width`; ``iv``, ``trips``: its variable and
    constant trips): no call but intrinsics, no branch out but its exit, and below :data:`TINY_TRIPS`
    affine addresses."""
    inside = set(map(id, blocks)) | {id(exit_)}
    deps = _Deps({id(i) for bb in blocks for i in bb.instructions})
    tiny = _tiny(trips, blocks, exit_, iv, deps)
    for bb in blocks:
        for i in bb.instructions:
            if isinstance(i, ir.CallInstr) and not getattr(i.callee, "name", "").startswith("llvm."):
                return False
            if isinstance(i, (ir.Ret, ir.Unreachable)) or (isinstance(i, ir.Terminator) and any(
                    isinstance(o, ir.Block) and id(o) not in inside for o in i.operands)):
                return False
            if tiny and isinstance(i, (ir.LoadInstr, ir.StoreInstr)):
                ptr = i.operands[0] if isinstance(i, ir.LoadInstr) else i.operands[1]
                if isinstance(ptr, ir.Instruction) and not _affine(ptr, iv, deps):
                    return False
    return True
