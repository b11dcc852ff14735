"""The one traversal mechanism of the IR: bottom-up folds and rule-driven rewrites.

:func:`fold` computes a value per node from its operands' values, by a function or a table
``{Op: fn(node, *operand_values)}`` (evaluation, printing, derivatives, LLVM emission); :func:`rewrite`
rebuilds an expression bottom-up, applying rules at every node until none fires (simplification,
substitution, inlining); :func:`fold_along` descends only where the analysis says; :func:`rebuild` gives a
tensor program's ops new bodies and rebuilds every reader.  All are iterative (no recursion limit) and
memoized per call; orders follow the first appearance in a left-to-right post-order walk, never a hash."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from operator import is_not
from typing import Any

from .expr import Expr, Op, ReduceArg, is_size
from .tensor import ComputeOp, Tensor

Rule = Callable[[Expr], "Expr | None"]


class MissingRuleError(NotImplementedError):
    """A rule table has no entry for an op: a clear error, not a wrong answer (tests walk :class:`Op`)."""


def walk(root: Expr) -> Iterator[Expr]:
    """Every distinct node under ``root``, operands before users (post-order), each pushed once on a stack
    of operand iterators.  Inside :func:`kept_walks` a root's order is kept from its first walk on."""
    memo = _KEPT.get()
    if memo is None or not root.src:
        return _walk(root)
    found = memo.get(root)
    if found is None:
        found = list(_walk(root))
        if memo.room >= len(found):
            memo.room -= len(found)
            memo[root] = found
    return iter(found)


class _Kept(dict):
    """Kept walks (root -> its nodes in order) and the room left for more."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room


_KEPT: ContextVar[_Kept | None] = ContextVar("tensorad_kept_walks", default=None)
KEPT_NODES = 2_000_000  # node references kept by one call at most (past that, walks are not kept)


@contextmanager
def kept_walks() -> Iterator[None]:
    """Keep each root's walk for the block (a ``lower`` call: its passes walk the same bodies
    again and again).  A walk is a pure function of its immutable root: only time changes."""
    if _KEPT.get() is not None:
        yield
        return
    token = _KEPT.set(_Kept(KEPT_NODES))
    try:
        yield
    finally:
        _KEPT.reset(token)


def chain(root: Expr, op: Op) -> list[Expr]:
    """The operands of a chain of one associative ``op`` at the top of ``root`` (``a && b &&
    c``, ``a * b * c``), left to right (a work list: no recursion)."""
    out: list[Expr] = []
    stack = [root]
    while stack:
        e = stack.pop()
        if e.op is op:
            stack.extend(reversed(e.src))
        else:
            out.append(e)
    return out


def _walk(root: Expr) -> Iterator[Expr]:
    src = root.src
    if not src:
        yield root
        return
    seen = {root}
    stack = [(root, iter(src))]
    while stack:
        node, operands = stack[-1]
        for child in operands:
            if child not in seen:
                seen.add(child)
                if child.src:
                    stack.append((child, iter(child.src)))
                    break
                yield child
        else:
            stack.pop()
            yield node


def walk_along(root: Any, operands: Callable[[Any], Iterable[Any]], seen: set | None = None) -> Iterator[Any]:
    """Every node reached from ``root`` through ``operands(node)``, each once, users before operands (a
    stack: the last operand first), skipping the nodes in ``seen``, which grows with those yielded."""
    seen = set() if seen is None else seen
    stack = [root]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            yield n
            stack.extend(operands(n))


def fold_along(root: Expr, operands: Callable[[Expr], Iterable[Expr]], visit: Callable[[Expr], Any],
               memo: dict) -> Any:
    """``memo[root]`` after ``memo[node] = visit(node)`` at every node reached from ``root`` through
    ``operands(node)``, operands first, nodes already in ``memo`` skipped; iterative."""
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if node in memo:
            continue
        if ready:
            memo[node] = visit(node)
            continue
        stack.append((node, True))
        stack.extend((x, False) for x in reversed(tuple(operands(node))) if x not in memo)
    return memo[root]


def _rule(table: Mapping[Op, Callable[..., Any]], node: Expr) -> Callable[..., Any]:
    try:
        return table[node.op]
    except KeyError:
        raise MissingRuleError(f"no rule for {node.op.name} nodes ({node})") from None


def fold(root: Expr, visit: Callable[..., Any] | Mapping[Op, Callable[..., Any]],
         memo: dict | None = None) -> Any:
    """Fold ``root`` bottom-up: ``visit(node, *operand_results)`` at every node.  ``visit`` may be a table
    keyed by :class:`Op`; an op with no entry raises ``MissingRuleError``."""
    memo = {} if memo is None else memo
    if isinstance(visit, Mapping):
        table = visit

        def visit(node, *args):  # noqa: F811
            return _rule(table, node)(node, *args)

    for node in walk(root):
        if node not in memo:
            memo[node] = visit(node, *[memo[c] for c in node.src])
    return memo[root]


def size_values(root: Expr) -> set[Expr]:
    """The nodes under ``root`` that are values of size variables and constants alone, reading a size
    (``1 / sqrt(float64(d))``): one value per call, a constant once the sizes are bound."""
    memo: dict = {}
    fold(root, lambda n, *k: (is_size(n) or any(s for s, _ in k), n.op not in (Op.READ, Op.REDUCE)
                              and (n.op is not Op.VAR or is_size(n)) and all(p for _, p in k)), memo)
    return {n for n, (sized, pure) in memo.items() if sized and pure}


def fold_pure(root: Expr, table: Mapping[Op, Callable[..., Any]], memo: dict) -> Any:
    """:func:`fold` driven by a table of *pure* functions (a value depends on its node alone), with ``memo``
    kept by the caller across calls: a subtree whose root is in ``memo`` is not walked again."""
    def visit(node: Expr) -> Any:
        return _rule(table, node)(node, *[memo[c] for c in node.src])

    found = memo.get(root, _ABSENT)
    return found if found is not _ABSENT else fold_along(root, operands, visit, memo)


_ABSENT = object()


def rewrite(root: Expr, rules: Rule | Mapping[Op, Rule], memo: dict | None = None) -> Expr:
    """Rebuild ``root`` bottom-up, applying ``rules`` (a replacement node or ``None``) to each rebuilt
    node to a fixed point; a replacement is rewritten too.  One work stack holds the walk and the
    replacements; ``memo`` maps each visited node to its result."""
    memo = {} if memo is None else memo
    if isinstance(rules, Mapping):
        table = rules

        def rules(node):  # noqa: F811
            fn = table.get(node.op)
            return fn(node) if fn is not None else None

    if root in memo:
        return memo[root]
    stack: list[tuple] = [(root, iter(root.src))]

    def settle(key: Expr, cur: Expr, rounds: int) -> None:
        """``memo[key]``: the rules applied to ``cur`` -- now, or after a replacement's frame."""
        if rounds >= 10_000:
            raise RuntimeError(f"rewrite rules do not reach a fixed point on {cur}")
        out = rules(cur)
        if out is None or out is cur:
            memo[key] = cur
        elif out in memo:
            memo[key] = memo[out]
        else:
            stack.append((key, cur, rounds, out))
            stack.append((out, iter(out.src)))

    while stack:
        frame = stack[-1]
        if len(frame) == 2:
            node, operands = frame
            for child in operands:
                if child not in memo:
                    stack.append((child, iter(child.src)))
                    break
            else:
                stack.pop()
                src = node.src
                if src:
                    new = tuple([memo[c] for c in src])
                    settle(node, node.replace(src=new) if any(map(is_not, new, src)) else node, 0)
                else:
                    settle(node, node, 0)
        else:  # a replacement rewritten: the rules again on its result, unless it came back
            key, cur, rounds, out = stack.pop()
            result = memo[out]
            if result is cur:
                memo[key] = cur
            else:
                settle(key, result, rounds + 1)
    return memo[root]


def substitute(root: Expr, mapping: Mapping[Expr, Expr]) -> Expr:
    """Replace variables (or any nodes) by expressions under ``root``, a replacement substituted again
    (``rewrite``'s semantics); leaf keys whose replacements hold no key take one memoized walk, and keys
    whose replacements lead back to themselves (``{i: j, j: i}``) are replaced at once."""
    return substituter(mapping)(root) if mapping else root


def substituter(mapping: Mapping[Expr, Expr]) -> Callable[[Expr], Expr]:
    """:func:`substitute` with one ``mapping`` for many roots, checked once, the rebuilt nodes shared."""
    if not mapping:
        return lambda root: root
    if not any(k.src for k in mapping):
        inside = {k: [n for n in walk(v) if n in mapping and not (n is k and v is k)]
                  for k, v in mapping.items()}
        if not any(inside.values()) or _cyclic(inside):
            return simultaneous(mapping)
    done: dict = {}
    return lambda root: rewrite(root, lambda n: mapping.get(n), done)


def rename(root: Expr, mapping: Mapping[Expr, Expr], read: Rule | None = None,
           memo: dict | None = None) -> Expr:
    """``root`` with variables replaced by ``mapping``, the axes of its reductions included, and each
    ``READ`` node by ``read`` when given (a replacement or ``None``); ``memo``: :func:`rewrite`'s."""
    if not mapping and read is None:
        return root

    def rule(node: Expr) -> Expr | None:
        if node.op is Op.VAR:
            return mapping.get(node)
        if node.op is Op.READ and read is not None:
            return read(node)
        if node.op is Op.REDUCE and any(a in mapping for a in node.arg.axes):
            ra = node.arg
            return node.replace(arg=ReduceArg(ra.combiner, tuple(mapping.get(a, a) for a in ra.axes),
                                              ra.value_index))
        return None

    return rewrite(root, rule, memo)


def _cyclic(graph: Mapping[Expr, list[Expr]]) -> bool:
    """Whether following ``graph``'s edges from some key comes back to it."""
    state: dict[Expr, int] = {}  # 1: on the current path, 2: done
    for start in graph:
        if start in state:
            continue
        stack = [(start, iter(graph[start]))]
        state[start] = 1
        while stack:
            node, edges = stack[-1]
            nxt = next(edges, None)
            if nxt is None:
                state[node] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return True
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(graph[nxt])))
    return False


def simultaneous(mapping: Mapping[Expr, Expr]) -> Callable[[Expr], Expr]:
    """Every node of ``mapping`` replaced by its value at once, never substituted again (a new
    variable may be another's old one: a swap); the nodes rebuilt are shared between calls."""
    memo: dict[Expr, Expr] = dict(mapping)

    def rebuilt(node: Expr) -> Expr:
        new = tuple([memo[c] for c in node.src])
        return node.replace(src=new) if any(map(is_not, new, node.src)) else node

    return lambda root: fold_along(root, operands, rebuilt, memo)


def operands(node: Expr) -> tuple[Expr, ...]:
    """``node.src``: the operands a whole-expression fold descends into."""
    return node.src


def replace_reads(root: Expr, fn: Callable[[Expr], Expr | None], memo: dict | None = None) -> Expr:
    """Rewrite every ``READ`` node with ``fn`` (inlining, renaming tensors); ``memo``: :func:`rewrite`'s."""
    return rewrite(root, {Op.READ: fn}, memo)


def match_pattern(pattern: Expr, e: Expr, holes: frozenset, bind: dict) -> bool:
    """Whether ``e`` is ``pattern`` with each node of ``holes`` (variables) replaced by an
    expression, the same one at each occurrence; ``bind`` receives the replacements."""
    stack = [(pattern, e)]
    while stack:
        p, x = stack.pop()
        if p in holes:
            if bind.setdefault(p, x) is not x:
                return False
        elif p is not x and (p.op is not x.op or p.dtype != x.dtype or p.arg != x.arg
                             or len(p.src) != len(x.src)):
            return False
        else:  # (equal nodes too: the holes under them bind to themselves)
            stack.extend(zip(p.src, x.src))
    return True


def free_vars(root: Expr) -> list[Expr]:
    """The variables used under ``root``, in order of first appearance (reduce axes excluded)."""
    bound: set[Expr] = set()
    out: list[Expr] = []
    for node in walk(root):
        if node.op is Op.REDUCE:
            bound.update(node.arg.axes)
        elif node.op is Op.VAR and node.lo is not None:
            out.append(node)
    return [v for v in dict.fromkeys(out) if v not in bound]


def empty_reduction(body: Expr) -> bool:
    """Whether ``body`` is a reduction over an empty box (``reduce_axis((0, 0))``): its
    identity, which reads nothing (the passes that look for reads skip it)."""
    return body.op is Op.REDUCE and any(a.hi <= a.lo for a in body.arg.axes)


def reads(root: Expr) -> list[Tensor]:
    """Tensors read under ``root``, in order of first appearance."""
    return list(dict.fromkeys(n.arg for n in walk(root) if n.op is Op.READ))


def op_reads(op: ComputeOp) -> list[Tensor]:
    """Tensors read by any body of ``op``, in order of first appearance."""
    out: dict[Tensor, None] = {}
    for b in op.body:
        out.update(dict.fromkeys(reads(b)))
    return list(out)


def tensor_graph(outputs: Iterable[Tensor], stop: Iterable[Tensor] = ()) -> list[Tensor]:
    """Every tensor the outputs depend on (themselves included), producers before consumers, in a
    depth-first post-order following reads in order of appearance; those in ``stop`` are not expanded."""
    stop = set(stop)
    order: dict[Tensor, None] = {}
    done_ops: set = set()
    stack: list[tuple[Tensor, bool]] = [(t, False) for t in reversed(list(outputs))]
    while stack:
        t, expanded = stack.pop()
        if expanded:
            order.setdefault(t, None)
            continue
        if t in order:
            continue
        stack.append((t, True))
        if isinstance(t.op, ComputeOp) and t.op not in done_ops and t not in stop:
            done_ops.add(t.op)
            stack.extend((dep, False) for dep in reversed(op_reads(t.op)) if dep not in order)
    return list(order)


def placeholders(outputs: Iterable[Tensor]) -> list[Tensor]:
    """The placeholder tensors the outputs depend on, in deterministic order."""
    return [t for t in tensor_graph(outputs) if t.is_placeholder]


def rebuild(outputs: Iterable[Tensor], bodies: Mapping) -> list[Tensor]:
    """``outputs`` with the ops in ``bodies`` given those bodies, every reader rebuilt, producers first."""
    def deps(op: ComputeOp) -> list[ComputeOp]:
        return [t.op for b in bodies.get(op, op.body) for t in reads(b) if isinstance(t.op, ComputeOp)]

    new: dict[ComputeOp, ComputeOp] = {}

    def read(node: Expr) -> Expr | None:
        op = new.get(node.arg.op)
        return None if op is None or op is node.arg.op else \
            Expr(Op.READ, node.dtype, node.src, Tensor(op, node.arg.value_index))

    def rebuilt(op: ComputeOp) -> ComputeOp:
        bs = tuple(replace_reads(b, read) for b in bodies.get(op, op.body))
        return op if bs == op.body else ComputeOp(op.name, op.tag, op.axes, bs, op.attrs, op.provenance)

    outputs = list(outputs)
    for t in reversed(outputs):  # (the last output's producers first)
        if isinstance(t.op, ComputeOp):
            fold_along(t.op, deps, rebuilt, new)
    return [Tensor(new[t.op], t.value_index) if t.op in new else t for t in outputs]
