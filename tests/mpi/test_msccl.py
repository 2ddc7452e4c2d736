"""An MSCCL program (msccl-tools' ring, 4 ranks) under MPI: pyar.allreduce with it equals the
MPI library's result, bitwise alike on every rank."""

import os

import numpy as np
import pytest

import pyar

from checks import agree

RING = os.path.join(os.path.dirname(__file__), "..", "data", "msccl", "allreduce_ring_4.xml")


@pytest.mark.parametrize("count", [1, 7, 64, 1000])
def test_the_ring_program_gives_the_library_result(comm, count):
    if comm.size != 4:
        pytest.skip("the program is for exactly 4 ranks")
    name = pyar.load_algorithm(RING)
    x = np.random.default_rng(comm.rank).standard_normal(count)
    mine = pyar.allreduce(x.copy(), algorithm=name, timeout=60)
    library = pyar.allreduce(x.copy(), algorithm="mpi", timeout=60)
    everyone = comm.allgather(mine.tobytes())
    agree(comm, np.allclose(mine, library) and len(set(everyone)) == 1,
          f"{name}: {mine[:4]} vs {library[:4]}")
