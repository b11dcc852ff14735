"""Contractions: reductions recognized as matrix products, and the packed matrix-product library they call.

* ``contraction``    reductions that are a (batched) matrix product in disguise; what packing them computes
* ``splitk``         long sums with few, unevenly shared column blocks summed in two halves
* ``padding``        zero-padded copies for range-guarded sides of a contraction
* ``descriptor``     one contraction's descriptor, read by the library at run time
* ``library``        the library: driver, packers and micro-kernel, compiled once per process
* ``pack_routines``  the library's generic packing routines for any linear read
* ``packing``        packing a contraction's two sides into the micro-kernel's panels
* ``microkernel``    contractions emitted as calls into the library
* ``version``        the library's version: a hash of the source its object code depends on"""
