"""``python -m pyar.kernels``: compile every host kernel into the Numba cache, once, before
many processes (MPI ranks) start using them."""

import sys
import time

from . import warm_up

start = time.perf_counter()
warm_up(file=sys.stdout)
print(f"pyar.kernels: warm in {time.perf_counter() - start:.1f} s")
