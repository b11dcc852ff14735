"""Algebraic simplification of expressions and the arithmetic it rests on.

* ``rules``    a table of rewrite rules keyed by ``Op`` (``simplify_expr``), run by ``ir.rewrite``
* ``index``    integer index arithmetic: normal forms, comparisons, ``//`` and ``%``
* ``ranges``   interval bounds of integer index expressions
* ``consts``   constant folding with the IR's exact semantics
* ``logic``    conditions as lists of conjuncts and disjuncts, and back
* ``bracket``  one spelling for a bracket sum, whatever axes it was written over"""
