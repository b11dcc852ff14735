"""Rewrites of sums: split by nonzeroness, reduction variables eliminated, factors lifted.

* ``split``         a sum's source split into terms nonzero in different places
* ``eliminate``     the isl plan: reduction variables solved for, substituted, tightened
* ``plan_key``      elimination plans shared between sums equal up to their variables' names
* ``lift``          one compute body optimized: lift, split, eliminate
* ``lift_sharing``  guard lifting done once per body shape and renamed for the others
* ``factor``        loop-invariant terms factored out of sums; equal sums shared
* ``chains``        a sum of one product over several variables as the cheapest sequence of smaller sums
* ``masked``        a mask's invariant conjuncts and factors moved out of its sum where that is cheaper
* ``merge``         sums over the same domain merged into one reduction
* ``tiling``        whether an elementwise body is a sum of pieces that tile its box"""
