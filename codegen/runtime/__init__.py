"""Calling compiled code: kernels, their parallel runtime, and kernels that leave the process.

* ``kernel``          ``Kernel``: a compiled loop program called on NumPy arrays
* ``compiled_cache``  the process's cache of compiled code: the kernels alive and a few recent
* ``threads``         the parallel runtime of generated kernels: the pool below, or libgomp
* ``pool``            tensorad's own thread pool for parallel regions
* ``export``          ``kernel.export``, ``ta.load`` and pickling
"""
