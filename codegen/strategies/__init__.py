"""How each op is computed: the registered strategies and their cost model.

* ``registry``       plan steps, strategies as registered objects (match, cost, lower), and the driver
* ``catalog``        the registered strategies, in order, and those ``microkernel=True`` forces
* ``cost``           the cost model in cycles; whether a backward loads or recomputes a value
* ``plain``          plain loops: accumulators, strips, collapsed axes, scans
* ``products``       matrix products: the micro-kernel, padded, split-K, parity, terms, shared factors,
                     gathered rows
* ``fusions``        an elementwise consumer computed as the epilogue of its reduction
* ``epilogue``       an elementwise consumer stored by the reduction it reads
* ``hoist``          subexpressions over fewer axes than their op, computed once per point
* ``zero_masks``     zero masks peeled off a value without reading outside its guard
* ``scan``           running reductions carried along an axis instead of reduced again
* ``scatter``        a sum (or a max, an argmax) whose output axis is a gathered index: one add (or
                     combine) per element read
* ``stencil``        a small output of shifted products as one stream with a tap per accumulator
* ``term_split``     a sum of several products as one product per term, or of a factor they share
* ``gathered_rows``  gathered rows copied once, so that a product reading them is a GEMM
* ``parity``         a strided convolution's input gradient as stride-1 convolutions"""
