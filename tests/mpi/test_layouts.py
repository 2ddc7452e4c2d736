"""Every memory layout of ``x`` and ``out``, for every collective, on both sides of each size
at which the executor changes path, against the MPI library's own collective.

The sizes: a plan's buffer up to RESIDENT_BYTES runs on a Resident (mailboxes), above it
on the general path, out of place on the variant that reads x itself; the pipelined
algorithms cut their pieces in schedule.SEGMENT elements (double_binary_tree each half of
the buffer, segmented_ring each of ``size`` blocks: theirs start at 2 and ``size`` segments).
(Out of place above RESIDENT_BYTES an evenly spaced x, x[::2], once reached MPI as a
strided view and was refused: BufferError.)
"""

import numpy as np
import pytest
from mpi4py import MPI

from pyar.runtime.plan import RESIDENT_BYTES
from pyar.core.ops import Op
from pyar.core.schedule import SEGMENT
from pyar.verify import library_reference, sample

from checks import agree
from test_collectives import call, oracle, verdict

SIZE = MPI.COMM_WORLD.size
DTYPE = np.dtype(np.int32)          # exact sums: a mis-read element cannot hide in rounding
VARIANTS = {"allreduce": ("new", "in_place", "out", "strided_out"),
            "reduce_scatter": ("new", "in_place", "out", "strided_out"),
            "allgather": ("new", "out", "strided_out"),
            "reduce": ("new", "in_place", "out", "strided_out"),
            "bcast": ("in_place",),
            "alltoall": ("new", "in_place", "out", "strided_out")}
LAYOUTS_1D = ("contiguous", "strided", "reversed")
LAYOUTS_2D = ("strided", "rows", "fortran", "reversed")


def layouts(collective):
    """(layout, number of dimensions) of x: alltoall's has a row per rank, so 2-D only."""
    if collective == "alltoall":
        return [(layout, 2) for layout in ("contiguous", *LAYOUTS_2D)]
    return [(layout, 1) for layout in LAYOUTS_1D] + [(layout, 2) for layout in LAYOUTS_2D]


def buffer_counts(collective, algorithm):
    """The schedule-buffer element counts at and just past each threshold, as this collective's
    buffers can have them (allgather's and alltoall's come in multiples of the rank count)."""
    limits = [RESIDENT_BYTES // DTYPE.itemsize, SEGMENT]
    if algorithm == "double_binary_tree":
        limits = [2 * SEGMENT]
    elif algorithm == "segmented_ring":
        limits = [SIZE * SEGMENT]
    step = SIZE if collective in ("allgather", "alltoall") else 1
    return [n for limit in limits for n in (limit // step * step, limit // step * step + step)]


def x_shape(collective, count, ndim):
    """x's shape for a schedule buffer of ``count`` elements, with ``ndim`` dimensions."""
    if collective == "alltoall":
        return (SIZE, count // SIZE)
    n = count // SIZE if collective == "allgather" else count
    if ndim == 1:
        return (n,)
    rows = next(d for d in range(2, n + 1) if n % d == 0)
    return (rows, n // rows)


def arrange(data, layout):
    """An array equal to ``data`` in the memory layout named ``layout``."""
    if layout == "contiguous":
        return data.copy()
    if layout == "strided":         # every other element of the last axis: x[::2], a[:, ::2]
        wide = np.zeros(data.shape[:-1] + (2 * data.shape[-1],), data.dtype)
        wide[..., ::2] = data
        return wide[..., ::2]
    if layout == "rows":            # every other row: a[::2]
        wide = np.zeros((2 * data.shape[0],) + data.shape[1:], data.dtype)
        wide[::2] = data
        return wide[::2]
    if layout == "fortran":
        return np.asfortranarray(data)
    return np.flip(np.flip(data).copy())        # reversed: negative strides on every axis


def cases():
    for collective, variants in VARIANTS.items():
        algorithms = ["auto"] + (["double_binary_tree", "segmented_ring"]
                                 if collective == "allreduce" else [])
        for algorithm in algorithms:
            for count in buffer_counts(collective, algorithm):
                for layout, ndim in layouts(collective):
                    for variant in variants:
                        yield pytest.param(collective, algorithm, count, layout, ndim, variant,
                                           id=f"{collective}-{algorithm}-{count}-{layout}"
                                              f"{ndim}d-{variant}")


def out_for(collective, x, variant):
    """The ``out`` argument of ``variant``, filled with 7s where it is a new array."""
    if variant == "new":
        return None
    if variant == "in_place":
        return x
    block = np.array_split(np.empty(x.size), SIZE)[MPI.COMM_WORLD.rank].size
    shape = {"reduce_scatter": (block,), "allgather": (SIZE, *x.shape)}.get(collective, x.shape)
    if variant == "out":
        return np.full(shape, 7, x.dtype)
    return arrange(np.full(shape, 7, x.dtype), "strided")


@pytest.mark.sweep
@pytest.mark.parametrize("collective,algorithm,count,layout,ndim,variant", list(cases()))
def test_layout(comm, collective, algorithm, count, layout, ndim, variant):
    root = comm.size - 1
    data = sample(comm.rank, int(np.prod(x_shape(collective, count, ndim))), DTYPE, Op.SUM,
                  seed=count).reshape(x_shape(collective, count, ndim))
    x = arrange(data, layout)
    out = out_for(collective, x, variant)
    if collective == "allreduce":
        expected, scale = library_reference(comm, data, Op.SUM)
    else:
        expected, scale = oracle(comm, collective, data, Op.SUM, root)
    try:
        result = call(collective, x, out, Op.SUM, algorithm, root)
        wrong = verdict(collective, result, expected, scale, Op.SUM, comm.size, DTYPE)
        if wrong is None and out is not None and result is not None and result is not out \
                and not (collective == "reduce_scatter" and out is x):
            wrong = "did not return out"
        if wrong is None and out is not x and not np.array_equal(x, data):
            wrong = "modified x"
    except Exception as e:      # made collective below: a rank raising alone would hang the rest
        wrong = f"{type(e).__name__}: {e}"
    agree(comm, wrong is None, f"{collective} {algorithm} count={count} {layout} {ndim}-D "
                               f"{variant}: {wrong}")
