"""Where an expression is zero: nonzeroness conditions, and proofs that a sum is zero.

* ``nonzero``     ``nz(e)``, the condition outside which ``e`` is zero, and ``assume``
* ``polynomial``  sums proved identically zero as polynomials whose atoms include sums
* ``refute``      a cheap, sound "not zero" tried first: a sum nonzero at one point
* ``rational``    exact rational arithmetic for the refuter"""
