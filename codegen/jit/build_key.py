"""The cache key of a ``ta.build``, computed from what lowering reads, before lowering.

The key is a canonical text of everything lowering and compilation depend on:

* the tensor DAG between the outputs and the inputs: every compute op reached and every expression node
  (op, dtype, operands, payload: bit-exact constants, variable bounds, combiners, gather extents and modes);
* the inputs in order and the outputs; every option (defaults resolved), the whole target, whether
  parallel loops call libgomp, the call entry's array layout, and :func:`.jit.engine.fingerprint`.

Tensors, variables, combiners and provenance groups are numbered in order of first reach, so the text
depends on no object id or counter.  Names are left out, except where they reach the kernel or steer
lowering: bounds-checked code and gathers under ``mode="raise"`` and pinned ``choices``.

:func:`describe` returns ``None`` where the program cannot be keyed before lowering (``tune``, an unknown
attribute kind, a placeholder missing from the inputs, an ``inline``/``materialize`` tensor outside the
program); ``build`` then keys the lowered program's text."""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from tensorad.ir.expr import DataIndex, Expr, Op, ReduceArg
from tensorad.ir.rewrite import fold_along, operands
from tensorad.ir.spelling import Unkeyable, float_bits
from tensorad.ir.tensor import ComputeOp, PlaceholderOp, Tensor

from ..options import Options
from ..target import Target
from .engine import fingerprint

VERSION = "buildkey-1"


def describe(outputs: list[Tensor], inputs: list[Tensor], opts: Options, target: Target,
             gomp: bool) -> str | None:
    """The key text of building ``outputs`` from ``inputs``, or ``None`` when it must be lowered first."""
    if opts.tune:
        return None
    try:
        d = _Describer(outputs, inputs, opts, target, gomp, names=False)
        text = d.text()
        if d.names and not d.names_from_start:  # a raise-mode gather: again, names throughout
            text = _Describer(outputs, inputs, opts, target, gomp, names=True).text()
        return text
    except Unkeyable:
        return None


def digest(text: str) -> str:
    """The file name of a key text (SHA-256, hex)."""
    return hashlib.sha256(text.encode()).hexdigest()


class _Describer:
    def __init__(self, outputs: list[Tensor], inputs: list[Tensor], opts: Options | None,
                 target: Target | None, gomp: bool, names: bool) -> None:
        self.outputs, self.inputs, self.opts = outputs, inputs, opts
        self.target, self.gomp = target, gomp
        self.input_of = {t: k for k, t in enumerate(inputs)}
        self.op_of: dict[ComputeOp, int] = {}
        self.queue: list[ComputeOp] = []
        self.node_of: dict[Expr, int] = {}
        self.combiner_of: dict[Any, int] = {}
        self.group_of: dict[int, int] = {0: 0}
        self.lines: list[str] = []
        self.names = names or bool(opts and (opts.checked or opts.choices))  # (and a raise-mode gather)
        self.names_from_start = self.names
        self.placeholder_of: dict[Tensor, int] | None = None  # (a graph key numbers placeholders)

    def tensor(self, t: Tensor) -> str:
        k = self.input_of.get(t)
        if k is not None:
            return f"in{k}"
        op = t.op
        if not isinstance(op, ComputeOp):
            if self.placeholder_of is None:  # a placeholder not among the inputs: lowering raises
                raise Unkeyable
            n = self.placeholder_of.get(t)
            if n is None:
                n = self.placeholder_of[t] = len(self.placeholder_of)
                self.lines.append(f"ph{n} {list(t.shape)} {t.dtype} {t.name!r}")
            return f"ph{n}"
        n = self.op_of.get(op)
        if n is None:
            n = self.op_of[op] = len(self.op_of)
            self.queue.append(op)
        return f"op{n}.{t.value_index}"

    def group(self, g: int) -> int:
        return self.group_of.setdefault(g, len(self.group_of))

    def value(self, v: Any) -> str:
        """An attribute value, exactly."""
        if v is None or isinstance(v, (bool, str)):
            return repr(v)
        if isinstance(v, int):
            return f"i{v}"
        if isinstance(v, float):
            return f"f{float_bits(v)}"
        if isinstance(v, Tensor):
            return self.tensor(v)
        if isinstance(v, Expr):
            return f"e{self.expr(v)}"
        if isinstance(v, (tuple, list)):
            return "(" + ",".join(self.value(x) for x in v) + ")"
        raise Unkeyable

    def expr(self, root: Expr) -> int:
        """The number of ``root``; writes a line for every node not written yet (operands
        first; iterative, so long chains of operations need no recursion)."""
        def visit(e: Expr) -> int:
            payload = self.payload(e)
            n = len(self.node_of)
            src = ",".join(str(self.node_of[s]) for s in e.src)
            self.lines.append(f"n{n} {e.op.value} {e.dtype} [{src}] {payload}")
            return n

        return fold_along(root, operands, visit, self.node_of)

    def payload(self, e: Expr) -> str:
        arg, op = e.arg, e.op
        if op is Op.CONST:
            if isinstance(arg, bool):
                return f"b{int(arg)}"
            if isinstance(arg, int):
                return f"i{arg}"
            if isinstance(arg, float):
                return f"f{float_bits(arg)}"
            raise Unkeyable
        if op is Op.VAR:
            name = f" {arg.name!r}" if self.names else ""
            return f"{arg.lo} {arg.hi}{name}"
        if op is Op.READ:
            return self.tensor(arg)
        if op is Op.REDUCE and isinstance(arg, ReduceArg):
            axes = ",".join(str(self.expr(a)) for a in arg.axes)
            return f"c{self.combiner(arg.combiner)} [{axes}] {arg.value_index}"
        if op is Op.DATA_INDEX and isinstance(arg, DataIndex):
            if arg.mode == "raise":
                self.names = True  # (its run-time error names the tensor and the index)
            return f"{arg.extent} {arg.mode} {arg.tensor!r} {arg.axis}"
        if arg is None:
            return ""
        raise Unkeyable

    def combiner(self, c: Any) -> int:
        n = self.combiner_of.get(c)
        if n is None:
            parts = [[self.expr(e) for e in getattr(c, f)] for f in ("lhs", "rhs", "result", "identity")]
            n = self.combiner_of[c] = len(self.combiner_of)
            self.lines.append(f"c{n} {c.kind} {c.name!r} {parts}")
        return n

    def text(self) -> str:
        head = [VERSION]
        for k, t in enumerate(self.inputs):
            kind = "placeholder" if isinstance(t.op, PlaceholderOp) else f"given.{t.value_index}"
            head.append(f"in{k} {kind} {list(t.shape)} {t.dtype}")
        outs = self.walk()
        tail = [f"outputs {outs}", self._options(), f"target {self._target()}",
                f"gomp {self.gomp}", f"fingerprint {fingerprint(self.target)}"]
        return "\n".join(head + self.lines + self._names() + tail)

    def walk(self) -> list[str]:
        """Writes the lines of every op reached from the outputs; their references."""
        outs = [self.tensor(t) for t in self.outputs]
        done = 0
        while done < len(self.queue):  # ops in order of first reach (the queue grows)
            op = self.queue[done]
            done += 1
            axes = ",".join(str(self.expr(a)) for a in op.axes)
            body = ",".join(str(self.expr(b)) for b in op.body)
            attrs = ",".join(f"{k!r}={self.value(v)}" for k, v in op.attrs)
            prov = op.provenance
            self.lines.append(f"op{self.op_of[op]} {op.tag!r} {prov.role.value} g{self.group(prov.group)} "
                              f"[{axes}] [{body}] [{attrs}]")
        return outs

    def _names(self) -> list[str]:
        """Tensor names (by reference), in a fixed order, when names are part of the key."""
        if not self.names:
            return []
        return ([f"name in{k} {t.name!r}" for k, t in enumerate(self.inputs)]
                + [f"name op{n} {op.name!r}" for op, n in self.op_of.items()])

    def _options(self) -> str:
        o = self.opts
        fields = {f.name: getattr(o, f.name) for f in dataclasses.fields(o)}
        fields.pop("target")
        fields.pop("num_threads")  # (a call-time setting: the code reads it when it runs)
        for k in ("inline", "materialize"):
            ops = []
            for t in fields.pop(k):
                n = self.op_of.get(t.op)
                if n is None:  # outside the program: lowering decides what that means
                    raise Unkeyable
                ops.append(n)
            fields[k] = sorted(set(ops))
        return "options " + repr(sorted(fields.items()))

    def _target(self) -> str:
        t = self.target
        return repr([(f.name, getattr(t, f.name)) for f in dataclasses.fields(t)])


@dataclasses.dataclass(frozen=True)
class GraphKey:
    """The key text of a tensor DAG and its numbering: the reference of every tensor reached (``ph<k>``,
    ``op<n>.<v>``) and the number of every variable, combiner and provenance group (alike in alike DAGs)."""

    text: str
    tensors: dict[Tensor, str]
    variables: dict[Expr, int]
    combiners: dict[Any, int]
    groups: dict[int, int]


def describe_graph(roots: list[Tensor]) -> GraphKey | None:
    """The canonical text of the DAG reached from ``roots`` (in order), names included, placeholders
    numbered in order of first reach, or ``None`` where it holds something the text cannot write exactly:
    the key of a differentiation (:mod:`tensorad.diffcache`)."""
    d = _Describer(list(roots), [], None, None, False, names=True)
    d.placeholder_of = {}
    try:
        refs = d.walk()
    except Unkeyable:
        return None
    tensors: dict[Tensor, str] = {t: f"ph{n}" for t, n in d.placeholder_of.items()}
    for op, n in d.op_of.items():
        for v in range(op.num_outputs):
            tensors[Tensor(op, v)] = f"op{n}.{v}"
    text = "\n".join([VERSION, "graph", *d.lines, *d._names(), f"roots {refs}"])
    variables = {e: n for e, n in d.node_of.items() if e.op is Op.VAR}
    return GraphKey(text, tensors, variables, dict(d.combiner_of), dict(d.group_of))
