"""LLVM IR (through llvmlite) for a loop program.

* ``emit``            LLVM IR for a whole loop program
* ``expr``            LLVM IR for expressions: fold tables for values and index arithmetic
* ``vector_math``     exp, log, tanh, sigmoid, erf and pow as inline vector IR
* ``math_functions``  out-of-line vector math: one internal function per function and type
* ``half``            float16/bfloat16 storage converted to and from float32
* ``bounds_checks``   ``checked=True``: every load and store tested against its buffer
* ``glue_table``      repeated glue as one loop over a table of pointer positions
* ``ir_loops``        small helpers for hand-written IR loops; function attributes (an opt level asked for)
* ``unrolled_chains`` loops LLVM's vectorizer must not see, and windows it must be asked to
* ``masked_tails``    short innermost loops with one masked vector tail, rows narrower than a vector
* ``lanes``           loops of order-free updates (a max/min winner's) run in lanes LLVM vectorizes
* ``vectorizable``    whether LLVM's loop vectorizer can take an innermost loop as emitted"""
