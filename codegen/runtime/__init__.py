"""Calling compiled code: kernels, their parallel runtime, and kernels that leave the process.

* ``kernel``          ``Kernel``: a compiled loop program called on NumPy arrays
* ``compiled``        the compiled code a kernel runs: entry points, IR, the owner of the code
* ``linking``         a kernel's object code and the library pieces it calls, linked
* ``blocks``          arrays at offsets fixed once in one block, read and written by a call's address table
* ``rows``            a generic kernel: a program of independent rows run at any count of rows
* ``compiled_cache``  the process's cache of compiled code: the kernels alive and a few recent
* ``threads``         the parallel runtime of generated kernels: the pool below, or libgomp
* ``pool``            tensorad's own thread pool for parallel regions
* ``export``          ``kernel.export``: a shared library, a C header and a description
* ``load``            ``ta.load``: an exported library checked, then mapped
* ``pickling``        a kernel's state when pickled, and the kernel made again from it"""
