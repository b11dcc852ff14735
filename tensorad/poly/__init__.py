"""The boundary between the IR and isl: every part of tensorad that reasons about integer index sets
converts through this package, so isl objects never enter the IR.

Modules: ``affine`` quasi-affine expressions as isl objects; ``domain`` integer sets over IR variables;
``linear`` linear forms of index expressions; ``nesting`` reduction domains that nest along an output axis
(scans); ``to_expr`` isl results back to IR."""

from .affine import IndexSpace, NotAffine, always, point_str

__all__ = ["IndexSpace", "NotAffine", "always", "point_str"]
