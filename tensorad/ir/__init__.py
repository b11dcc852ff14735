"""The IR: hash-consed scalar expressions, tensors, reducers, the rewriter and the printer; it imports no
other part of tensorad.

Modules: ``expr`` hash-consed scalar nodes; ``dtype`` data types; ``tensor`` tensors and their ops;
``reducer`` commutative reducers; ``rewrite`` the one traversal mechanism; ``printer`` text and HTML
forms; ``spelling`` name-free spellings; ``intrange`` proofs that index arithmetic fits 64 bits;
``collect`` fewer garbage collections while compiling; ``locks`` the process's locks, which a fork
waits for; ``trace`` stage times and texts."""

from .dtype import FLOAT_DTYPES
from .expr import FALSE, TRUE, Expr, Op, cast, const, var
from .printer import expr_to_str, print_tensor_recursively, tensor_to_html, tensor_to_str
from .reducer import comm_reducer
from .rewrite import (
    MissingRuleError,
    fold,
    free_vars,
    op_reads,
    placeholders,
    rewrite,
    substitute,
    tensor_graph,
    walk,
)
from .tensor import Tensor

# The printer's text forms, attached once every module of the IR is loaded (imports stay acyclic).
Expr.__repr__ = Expr.__str__ = expr_to_str
Tensor.__str__ = tensor_to_str
Tensor._repr_html_ = tensor_to_html

__all__ = ["FLOAT_DTYPES", "FALSE", "TRUE", "Expr", "Op", "cast", "const", "var", "print_tensor_recursively",
           "comm_reducer", "MissingRuleError", "fold", "free_vars", "op_reads", "placeholders", "rewrite",
           "substitute", "tensor_graph", "walk", "Tensor"]
