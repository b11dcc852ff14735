"""Differential fuzzing of tensorad: random programs checked against oracles.

* :mod:`.program` -- the generator of random well-formed programs (trees rendered to source);
* :mod:`.data`, :mod:`.options` -- input data profiles and build options drawn at random;
* :mod:`.checks` -- build vs evaluate, checked mode, optimizer, reverse vs finite differences,
  jvp vs reverse, HVP vs finite differences of the gradient, one extent made a size variable vs
  the program written at another size;
* :mod:`.runner` -- worker processes with a time limit, shrinking, reproducer scripts.

``python -m fuzz --n 10000`` (``make fuzz N=10000``) checks 10,000 programs; the regular test suite
runs a few hundred programs (``tests/fuzz``).  Not part of the installed package.
"""
