"""Polyhedral loop building: iteration domains as isl sets, schedules, isl's AST builder, nest fusion,
and exact work counts.

* ``domain``         one materialized op's iteration domains as polyhedral statements
* ``schedule``       loop order (scalar accumulator or accumulate-in-output), parallel loop
* ``isl_ast``        polyhedral statements to loop statements through isl's AST builder
* ``ast_check``      proof that isl's loops scan exactly the domains, and a safe rebuild
* ``work``           exact work: how many times innermost loop bodies execute
* ``cascade``        float32 sums accumulated in blocks of partial sums (error ~ log n)
* ``nest_groups``    consecutive plan steps that walk the same outer loops grouped into one nest, and
                     sums over a group's rows into columns joined to it
* ``fused_nest``     one fused group lowered to a single nest
* ``strip_groups``   sibling strip-form reductions in one pass
* ``stripmine``      axes read through ``//`` and ``%`` scanned as loops over their digits
* ``coalesce``       an elementwise nest's two last axes scanned as one loop when rows are short
* ``box_pieces``     an elementwise body's affine zero-guards decided per piece of its box
* ``fills``          where a program's fills run: fused into a nest, or in parallel
* ``nest_key``       a name-free key of a loop nest, its leading constant offsets taken out: equal nests
                     are emitted once
* ``shared_nests``   groups lowered once per name-free key, the others renamed"""
