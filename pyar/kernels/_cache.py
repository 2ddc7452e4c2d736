"""One process at a time compiles into, or loads from, a kernel's Numba cache.

Numba's on-disk cache is not safe for processes that fill it at the same
time (MPI ranks starting together): index entries get lost and data files
overwritten. Numba compiles (or loads from the cache) only when no compiled
signature fits a call's arguments, through the dispatcher's
``_compile_for_args``; :func:`serialise` wraps that one path in an exclusive
``flock`` on a file beside the cache, so calls that fit pay nothing. Numba's
own set-up of its typing and target contexts (about half a second, once a
process) runs before the lock, so that ranks starting together do it at once
rather than one after another; within a process, one thread at a time (under
Numba's compiler lock: threads refreshing the contexts at once raised
"generator already executing" in a third of the processes whose three
threads made their first kernel calls together).
"""

import fcntl
import os
import tempfile

from numba.core.compiler_lock import global_compiler_lock


class lock:
    """An exclusive ``flock`` beside ``kernel``'s cache (else in the temp directory)."""

    def __init__(self, kernel):
        try:
            folder = kernel._cache._cache_path
            os.makedirs(folder, exist_ok=True)
        except (AttributeError, OSError):
            folder = tempfile.gettempdir()
        self.path = os.path.join(folder, "pyar-kernels.lock")

    def __enter__(self):
        self.file = open(self.path, "a")
        fcntl.flock(self.file, fcntl.LOCK_EX)

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def serialise(kernel):
    """Route ``kernel``'s compilations through :class:`lock`; returns ``kernel``."""
    compile_for_args = kernel._compile_for_args

    def locked(*args, **kws):
        with global_compiler_lock:
            kernel.typingctx.refresh()
            kernel.targetctx.refresh()
        with lock(kernel):
            return compile_for_args(*args, **kws)

    kernel._compile_for_args = locked
    return kernel
