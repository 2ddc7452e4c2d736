"""What each collective takes and gives, in terms of the buffer its schedule runs on.

A schedule runs on one buffer, ``data``, of ``count`` elements (see
:mod:`pyar.schedule`). For each collective this module says how big it is
for a caller's ``x``, what it holds before the schedule runs and where the
result is afterwards; the simulator and the MPI collectives both follow it.

=============== ========== ============================== =========================
collective      count      data before                    result
=============== ========== ============================== =========================
allreduce       x.size     x                              data
reduce_scatter  x.size     x                              block ``rank`` of data
allgather       N * x.size x in block ``rank``            data, shape ``(N, *x.shape)``
reduce          x.size     x                              data on the root, else None
bcast           x.size     x (only the root's matters)    data
alltoall        x.size     x (block i for rank i)         data (block j from rank j)
barrier         0          nothing                        None
=============== ========== ============================== =========================

Blocks are those of ``numpy.array_split`` (:func:`pyar.schedule.split`).
"""

from __future__ import annotations

import numpy as np

from .schedule import split

REDUCING = frozenset({"allreduce", "reduce_scatter", "reduce"})
ROOTED = frozenset({"reduce", "bcast"})


def data_count(collective: str, x_size: int, size: int) -> int:
    """Elements of the schedule's buffer for an ``x`` of ``x_size`` elements on ``size`` ranks."""
    if collective == "allgather":
        return x_size * size
    return 0 if collective == "barrier" else x_size


def block(count: int, size: int, rank: int) -> slice:
    """Block ``rank`` of a buffer of ``count`` elements cut in ``size`` blocks."""
    return slice(*split(count, size)[rank])


def check_alltoall(shape, size: int) -> None:
    """ValueError unless an all-to-all input of ``shape`` has one block per rank."""
    if not shape or shape[0] != size:
        raise ValueError(f"alltoall needs x.shape[0] == {size} (the number of ranks), "
                         f"got shape {tuple(shape)}")


def load(collective: str, x: np.ndarray, rank: int, size: int) -> np.ndarray:
    """A new ``data`` buffer holding what ``x`` contributes before the schedule runs."""
    if collective == "allgather":
        data = np.zeros(x.size * size, x.dtype)
        data[block(data.size, size, rank)] = x.reshape(-1)
        return data
    if collective == "alltoall":
        check_alltoall(x.shape, size)
    return np.array(x, order="C").reshape(-1)


def result(collective: str, data: np.ndarray, shape, rank: int, size: int, root: int = 0):
    """What the collective returns on ``rank``, given its ``data`` after the schedule ran."""
    if collective == "reduce_scatter":
        return data[block(data.size, size, rank)]
    if collective == "allgather":
        return data.reshape((size, *shape))
    if collective == "barrier" or (collective == "reduce" and rank != root):
        return None
    return data.reshape(shape)
