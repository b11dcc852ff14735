"""How each op is computed: the registered strategies and their cost model.

The registry and its driver, the strategies by kind, and the cost model:

* ``registry``       the plan steps strategies lower to (a kind per nest or call), strategies
  as registered objects (match, cost, lower), and the driver that keeps the forced or cheapest
* ``catalog``        the registered strategies, in order, and those ``microkernel=True`` forces
* ``cost``           the cost model in cycles; whether a backward loads or recomputes a value
* ``plain``          plain loops: accumulators, strips, collapsed axes, scans
* ``products``       matrix products: the micro-kernel, padded, split-K, parity, terms, gathered rows
* ``fusions``        an elementwise consumer computed as the epilogue of its reduction

and what strategies rewrite an op into (each module also holds its strategies, where loops
do not read it):

* ``epilogue``       an elementwise consumer stored by the reduction it reads
* ``hoist``          subexpressions over fewer axes than their op, computed once per point
* ``zero_masks``     zero masks peeled off a value without reading outside its guard
* ``scan``           running reductions carried along an axis instead of reduced again
* ``scatter``        a sum whose output axis is a gathered index: one add per element read
* ``stencil``        a small output of shifted products as one stream with a tap per accumulator
* ``term_split``     a sum of several products summed as one product per term
* ``gathered_rows``  gathered rows copied once, so that a product reading them is a GEMM
* ``parity``         a strided convolution's input gradient as stride-1 convolutions"""
