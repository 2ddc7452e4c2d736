"""``python -m pyar.kernels [--fresh]``: compile every host kernel into the Numba cache once,
before many processes (MPI ranks) start using them. ``--fresh`` first empties the cache of
these kernels (Numba revalidates a cached kernel against host.py only, not the files it uses)."""

import sys
import time

from . import warm_up

start = time.perf_counter()
warm_up(fresh="--fresh" in sys.argv[1:], file=sys.stdout)
print(f"pyar.kernels: warm in {time.perf_counter() - start:.1f} s")
