"""Which LLVM pipeline a kernel module gets at ``opt_level=3``: ``-O2``, plus what its nests need.

LLVM's ``-O3`` differs from ``-O2`` by a few passes and thresholds: aggressive instruction
combining, argument promotion, call-site splitting, non-trivial loop unswitching, and the full
unroller's threshold (300 instead of 150).  Measured on every function of the benchmark layers
(``tools/opt_compare.py``, session 21), only the last changes a kernel's speed: a max pool's
window loops (3 x 3, a reduction whose stores do not move with the window) unrolled make its
forward 2x and its winner backward 3x faster; everything else ran as fast at ``-O2``, while
``-O3`` spent up to half again the passes' time on the packers (non-trivial unswitching) and on
fills and copies whose short loops it unrolls.  So a module compiles at ``-O2``, and with the
``-O3`` unroll threshold when one of its nests matches a registered :class:`Need` -- the
decision reads the lowered nests and the target, never a name.

The choice travels with the module text (:func:`mark`, a comment line the JIT reads back:
:func:`.jit.pipeline_of`), so recompiling a kernel's text -- its optimized IR on demand, export,
unpickling -- takes the same pipeline.  Modules without the mark (the library's pieces, hand
written IR) compile at the level they are given.
"""

from __future__ import annotations

from typing import Protocol

from tensorad.ir.expr import Op
from tensorad.ir.rewrite import free_vars

from .program import Assign, If, Loop, Nest, Program, Store
from .target import Target

MARK = "; tensorad pipeline: "
WINDOW_TRIPS = 8  # a reduction loop of at most this many constant trips is a window (3x3, 7x7)


class Need(Protocol):
    """A property of a nest that asks the pipeline for more than ``-O2``: ``name`` is what it
    asks (a word of :func:`mark`'s line), ``match`` whether a nest has it on ``target``."""

    name: str

    def match(self, nest: Nest, target: Target) -> bool: ...


class WindowUnroll:
    """A nest that stays loops with a short window of a reduction -- a loop of 2 to
    :data:`WINDOW_TRIPS` constant trips whose variable no store inside it is indexed by (a max
    pool's ``ry``/``rx``, a winner's window) -- asks for ``-O3``'s full-unroll threshold: the
    window unrolled folds its index arithmetic into constants and lets the loop around or
    inside it vectorize.  Products emitted on the library (``gemm``) have no such loops."""

    name = "unroll"

    def match(self, nest: Nest, target: Target) -> bool:
        return "gemm" not in nest.attrs and any(_is_window(loop) for loop in _loops(nest.body))


NEEDS: list[Need] = [WindowUnroll()]


def needs(program: Program, target: Target) -> list[str]:
    """The names of the registered needs some nest of ``program`` has, in registry order."""
    nests = [s for s in program.steps if isinstance(s, Nest)]
    return [n.name for n in NEEDS if any(n.match(nest, target) for nest in nests)]


def mark(ir_text: str, wanted: list[str]) -> str:
    """``ir_text`` with its pipeline line: ``-O2`` and the needs' words."""
    return MARK + " ".join(["O2", *wanted]) + "\n" + ir_text


def asked(ir_text: str) -> tuple[int, tuple[str, ...]] | None:
    """The level and needs a module's pipeline line asks for; ``None`` without one."""
    if not ir_text.startswith(MARK):
        return None
    level, *words = ir_text[len(MARK):ir_text.index("\n")].split()
    return int(level[1:]), tuple(words)


def _loops(stmts: tuple):
    for st in stmts:
        if isinstance(st, Loop):
            yield st
            yield from _loops(st.body)
        elif isinstance(st, If):
            yield from _loops(st.then)
            yield from _loops(st.orelse)


def _stores(stmts: tuple):
    for st in stmts:
        if isinstance(st, (Store, Assign)):
            yield st
        elif isinstance(st, Loop):
            yield from _stores(st.body)
        elif isinstance(st, If):
            yield from _stores(st.then)
            yield from _stores(st.orelse)


def _is_window(loop: Loop) -> bool:
    if loop.kind != "serial" or loop.lo.op is not Op.CONST or loop.hi.op is not Op.CONST:
        return False
    trips = -(-(int(loop.hi.arg) - int(loop.lo.arg)) // loop.step)
    if not 2 <= trips <= WINDOW_TRIPS:
        return False
    writes = list(_stores(loop.body))
    return bool(writes) and all(loop.var not in free_vars(i) for st in writes if isinstance(st, Store)
                                for i in st.index)
