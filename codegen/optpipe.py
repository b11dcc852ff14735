"""Which LLVM pipeline a kernel module gets at ``opt_level=3``: ``-O2``, or ``-O3`` where a nest needs it.

LLVM's ``-O3`` differs from ``-O2`` by a few passes and thresholds: aggressive instruction
combining, argument promotion, call-site splitting, non-trivial loop unswitching and the full
unroller's threshold (300 instead of 150).  Measured on every function of the benchmark layers
(``tools/opt_compare.py``, session 21), two changed a kernel's speed: the unroll threshold, on
a max pool's window loops (3 x 3, a reduction whose stores do not move with the window:
unrolled, its forward ran 2x and its winner backward 3x faster), and unswitching, on those
windows' bounds tests and on a row-packed panel's full-or-partial test (now hoisted by
:mod:`.packing` itself).  Everything else ran as fast at ``-O2``, while ``-O3`` spent a third
more of the passes' time -- unrolling fills and copies, unswitching packers.  So a kernel
module compiles at ``-O2``, and at ``-O3`` when one of its nests matches a registered
:class:`Need`: the decision reads the lowered nests and the target, never a name.

The choice travels with the module text (:func:`mark`, a first comment line that
:func:`.jit.ladder` reads back), so recompiling a kernel's text -- its optimized IR on demand,
export, unpickling -- takes the same pipeline.  Modules without the line (the library's pieces,
hand-written IR) compile at the level they are given.
"""

from __future__ import annotations

from typing import Protocol

from tensorad.ir.expr import Op
from tensorad.ir.rewrite import free_vars

from .program import If, Loop, Nest, Program, stores
from .target import Target

MARK = "; tensorad pipeline: "
WINDOW_TRIPS = 8  # a reduction loop of at most this many constant trips is a window (3x3, 7x7)


class Need(Protocol):
    """A property of a nest that asks for more than ``-O2``: ``level``, the ``-O`` level it
    needs; ``match``, whether a nest has it on ``target``."""

    level: int

    def match(self, nest: Nest, target: Target) -> bool: ...


class ReductionWindow:
    """A nest that stays loops with a short window of a reduction -- a loop of 2 to
    :data:`WINDOW_TRIPS` constant trips whose variable no store inside it is indexed by (a
    max pool's ``ry``/``rx``, a winner's window) -- needs ``-O3``: its threshold unrolls the
    window, whose index arithmetic then folds into constants, and unswitching takes the
    window's bounds tests out of the loop around it.  Products emitted on the library
    (``gemm``) have no such loops."""

    level = 3

    def match(self, nest: Nest, target: Target) -> bool:
        return "gemm" not in nest.attrs and any(_is_window(loop) for loop in _loops(nest.body))


NEEDS: list[Need] = [ReductionWindow()]


def level(program: Program, target: Target) -> int:
    """The ``-O`` level of ``program``'s module: 2, or the most a registered need of one of
    its nests asks."""
    nests = [s for s in program.steps if isinstance(s, Nest)]
    return max([2] + [n.level for n in NEEDS if any(n.match(nest, target) for nest in nests)])


def mark(ir_text: str, opt_level: int) -> str:
    """``ir_text`` with its pipeline line."""
    return f"{MARK}O{opt_level}\n{ir_text}"


def asked(ir_text: str) -> int | None:
    """The level a module's pipeline line asks for; ``None`` without one."""
    if not ir_text.startswith(MARK):
        return None
    return int(ir_text[len(MARK) + 1:ir_text.index("\n")])


def _loops(stmts: tuple):
    for st in stmts:
        if isinstance(st, Loop):
            yield st
            yield from _loops(st.body)
        elif isinstance(st, If):
            yield from _loops(st.then)
            yield from _loops(st.orelse)


def _is_window(loop: Loop) -> bool:
    if loop.kind != "serial" or loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST:
        return False
    trips = -(-(int(loop.hi.arg) - int(loop.lo.arg)) // loop.step)
    return 2 <= trips <= WINDOW_TRIPS and all(loop.var not in free_vars(i) for st in stores(loop.body)
                                              for i in st.index)
