"""The boundary between the IR and isl: index expressions and conditions as isl objects.

Every part of tensorad that reasons about integer index sets (bounds checking, the
nonzeroness optimizer, loop generation, work counting) converts through this package, so isl
objects never enter the IR and the conversion rules live in one place.

Modules: ``affine`` quasi-affine expressions as isl objects; ``domain`` integer sets over IR
variables; ``linear`` linear forms of index expressions; ``nesting`` reduction domains that
nest along an output axis (running reductions, scans); ``to_expr`` isl results back to IR.
"""

from .affine import IndexSpace, NotAffine, point_str

__all__ = ["IndexSpace", "NotAffine", "point_str"]
