"""What a large allreduce allocates beyond x and its result (docs/settings.md, "Memory").

numpy's allocations are traced by tracemalloc. The first call on a new Comm
is measured, so the plan's compilation and its scratch and landing buffers
(allocated once per plan and dtype, kept with it) are included.
"""

import tracemalloc

import numpy as np
import pytest

import pyar
from pyar.runtime.plan import RESIDENT_BYTES

from checks import agree

COUNT = 4 << 20             # float32 elements: a 16 MiB buffer, far past RESIDENT_BYTES
BOOKKEEPING = 64 << 10      # bytes: the compiled plan's Python objects


@pytest.mark.sweep
@pytest.mark.parametrize("variant", ["new", "out", "in_place"])
@pytest.mark.parametrize("algorithm", ["auto", "ring", "rabenseifner"])
def test_a_large_allreduce_allocates_at_most_one_buffer_beyond_its_result(comm, algorithm,
                                                                          variant):
    pyar.allreduce(np.ones(RESIDENT_BYTES, np.float32), algorithm=algorithm)   # kernels loaded
    x = np.arange(COUNT, dtype=np.float32) % 1000 + comm.rank + 1
    out = {"new": None, "out": np.empty_like(x), "in_place": x}[variant]
    c = pyar.Comm(comm)
    tracemalloc.start()
    try:
        result = pyar.allreduce(x, out, algorithm=algorithm, comm=c)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        c.free()
    extra = peak - (result.nbytes if variant == "new" else 0)
    agree(comm, extra <= x.nbytes + BOOKKEEPING,
          f"{algorithm} {variant}: {extra / x.nbytes:.3f} buffers beyond x and the result")
