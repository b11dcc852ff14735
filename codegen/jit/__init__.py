"""Object code: compiled through LLVM's JIT, checked, and cached on disk.

* ``engine``         LLVM's JIT: an engine per kernel (freed with it), one for shared code
* ``isolate``        compile jobs that may abort LLVM run in worker processes, under a CPU limit
* ``compile_job``    a compile job as data and the one LLVM pipeline (a worker runs it as a script)
* ``module_split``   a kernel's module cut into parts compiled side by side; twins merged, nests alike once
* ``object_check``   a structural check of object code before the JIT links it
* ``disk_cache``     a persistent object cache shared by processes, never trusted blindly
* ``build_key``      the cache key of a ``ta.build``, computed before lowering"""
