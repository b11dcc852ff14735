"""Rewrites of the tensor program before planning: which tensors get buffers, and sums computed once
where the program spells them several times.  ``lower.PRE_PLANNING_PASSES`` runs them in order.

* ``buffers``          which tensors get a buffer (a sum's windowed operand in place of its input); the others
                       are inlined into their readers
* ``chains``           a sum of one product over several variables as the cheapest nesting of smaller sums; a
                       running reduction over independent ranges (a summed-area table) as nested scans
* ``footprint``        a materialized tensor shrunk to the points its readers read
* ``speculate``        ``if_then_else`` on data tests made ``select`` where that is safe
* ``choice_factoring`` costly operations shared by an eager choice's branches, computed once
* ``transposed_sums``  one sum computed once when the program spells it twice, once transposed
* ``copy_elision``     an output that copies a temporary computes the temporary itself
* ``strided_sums``     a sum over one residue class of an axis, re-indexed to stride 1; a flat axis read
                       through ``//`` and ``%`` summed over its digits
* ``stacked_sums``     short products summed, or products sharing a side, as one product over one more axis
* ``shared_scatters``  one buffer for a masked sum of scatter-adds that several readers read
* ``shared_windows``   a compound operand read through windows, computed once as a tensor
* ``winograd``         a 3x3 stride-1 sum (a convolution, its data gradient) by Winograd's transforms where
                       they pay
* ``row_bound``        after lowering, a generic kernel's block: its loops over rows bounded by a count read
                       when it runs (the ``rows`` option)
* ``shared_packing``   after lowering, one packed copy of a side B that several matrix products read alike"""
