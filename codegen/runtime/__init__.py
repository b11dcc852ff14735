"""Calling compiled code: kernels, their parallel runtime, and kernels that leave the process.

* ``kernel``   ``Kernel``: a compiled loop program called on NumPy arrays
* ``threads``  the parallel runtime of generated kernels: the pool below, or libgomp
* ``pool``     tensorad's own thread pool for parallel regions
* ``export``   ``kernel.export``, ``ta.load`` and pickling
"""
