"""Out-of-line vector math: one internal function per (function, type) per module.

Inlined at every use, :mod:`.llvm.vector_math`'s 30-150 instructions per call cost LLVM time per copy;
out of line, each is compiled once per module: ``P_math_<fn>_<f32|f64>``, the scalar function
(``noinline``), whose ``vector-function-abi-variant`` attribute names ``P_math_<fn>_v<L><f32|f64>``, its
vector form, which LLVM's vectorizers call in vectorized loops (kept in ``llvm.compiler.used``).

Inline code runs faster, so :func:`inline_budget` keeps the first uses inline (at most
:data:`NEST_INLINE_SITES` per nest and :data:`MODULE_INLINE_SITES` per module) and the rest call."""

from __future__ import annotations

import llvmlite.ir as ir

from tensorad.ir.expr import Op
from tensorad.ir.rewrite import walk

from . import vector_math as llvm_math
from .ir_loops import Attributes

# the functions with an inline body (:mod:`.llvm.vector_math`), by name and by operation
EMIT = {"exp": llvm_math.emit_exp, "log": llvm_math.emit_log, "tanh": llvm_math.emit_tanh,
        "sigmoid": llvm_math.emit_sigmoid, "erf": llvm_math.emit_erf, "pow": llvm_math.emit_pow}
MATH_OPS = {Op.EXP: "exp", Op.LOG: "log", Op.TANH: "tanh", Op.SIGMOID: "sigmoid", Op.ERF: "erf",
            Op.POW: "pow"}
NEST_INLINE_SITES = 4  # a nest with more math sites calls the library for all of them
MODULE_INLINE_SITES = 16  # inline sites of a whole module, nests in program order

_F32, _F64 = ir.FloatType(), ir.DoubleType()


def math_sites(exprs) -> int:
    """How many distinct float math nodes (:data:`MATH_OPS`) ``exprs`` hold: what inline emission copies."""
    nodes = {n for e in exprs for n in walk(e)}
    return sum(1 for n in nodes if n.op in MATH_OPS and n.dtype.startswith("float"))


class InlineBudget:
    """Which nests of one module inline their math: owned by one emission, asked per nest in order."""

    def __init__(self) -> None:
        self.left = MODULE_INLINE_SITES

    def inline(self, sites: int) -> bool:
        """Whether a nest with ``sites`` math sites inlines them (and spends the budget)."""
        if sites == 0:
            return True
        if sites > NEST_INLINE_SITES or sites > self.left:
            return False
        self.left -= sites
        return True


class MathLibrary:
    """The out-of-line math functions of one module (made on first use), ``lanes(dtype)`` lanes wide."""

    def __init__(self, module: ir.Module, prefix: str, lanes) -> None:
        self.module, self.prefix, self.lanes = module, prefix, lanes
        self.functions: dict[tuple[str, str], ir.Function] = {}
        self.used: list[ir.Function] = []

    def call(self, b: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
        """``name(*args)`` (scalar float or double operands) as a call of the library."""
        return b.call(self.scalar(name, args[0].type), list(args))

    def scalar(self, name: str, t: ir.Type) -> ir.Function:
        dtype = "float32" if t == _F32 else "float64"
        key = (name, dtype)
        fn = self.functions.get(key)
        if fn is not None:
            return fn
        sfx = "f32" if dtype == "float32" else "f64"
        arity = 2 if name == "pow" else 1
        lanes = self.lanes(dtype)
        base = f"{self.prefix}_math_{name}_{sfx}"
        vec = self._define(f"{self.prefix}_math_{name}_v{lanes}{sfx}", name, ir.VectorType(t, lanes), arity)
        fn = self._define(base, name, t, arity)
        fn.attributes.add_string("vector-function-abi-variant",
                                 f"_ZGV_LLVM_N{lanes}{'v' * arity}_{base}({vec.name})")
        self.used.append(vec)
        self.functions[key] = fn
        return fn

    def _define(self, symbol: str, name: str, t: ir.Type, arity: int) -> ir.Function:
        fn = ir.Function(self.module, ir.FunctionType(t, [t] * arity), symbol)
        fn.linkage = "internal"
        fn.attributes = Attributes()
        for a in ("nounwind", "noinline", "willreturn", "memory(none)"):
            fn.attributes.add(a)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.ret(EMIT[name](b, *fn.args))
        return fn

    def finish(self) -> None:
        """Keep the vector variants until the vectorizers have used them (``llvm.compiler.used``)."""
        if not self.used:
            return
        arr = ir.ArrayType(ir.PointerType(), len(self.used))
        g = ir.GlobalVariable(self.module, arr, "llvm.compiler.used")
        g.linkage = "appending"
        g.section = "llvm.metadata"
        g.initializer = ir.Constant(arr, self.used)
