"""The plain-NumPy reference evaluator ``ta.evaluate`` (the test oracle of the project).

Modules: ``numpy_eval`` the evaluator; ``feed`` checks of the arrays it is fed."""

from .numpy_eval import ARRAY_RULES, CONTEXT_OPS, ORDERS, evaluate, evaluate_in_order

__all__ = ["ARRAY_RULES", "CONTEXT_OPS", "ORDERS", "evaluate", "evaluate_in_order"]
