"""Runs ``pyar bench`` under mpiexec after preparing pyar for a test (tests/test_bench.py).

    mpiexec -n N python -m mpi4py tests/bench_driver.py MODE [OUTDIR] -- BENCH_ARGS...

MODE:
  broken     registers ``copy_left``: an allreduce that copies the left neighbour's
             data instead of reducing, which the bench must count as wrong
  no_torch   makes ``import torch`` fail, as on a machine without torch
  stand_ins  runs the bench once per other collective (``--json OUTDIR/NAME.json``), giving
             pyar a plain mpi4py implementation of each collective it does not have yet,
             so that the bench's table entries are exercised before pyar has them
Exits with the bench's status (the last one's, in stand_ins mode: any non-zero wins).
"""

import sys

import numpy as np

import pyar
from pyar.cli import main
from pyar.executors.mpi import library_op
from pyar.ops import Op, resolve
from pyar.schedule import Chunk, Recv, Send, Step

OTHERS = ("reduce_scatter", "allgather", "reduce", "bcast", "alltoall")


def copy_left(rank, size, count, topology=None):
    if size == 1:
        return []
    everything = Chunk("data", 0, count)
    return [Step([Send((rank + 1) % size, everything),
                  Recv((rank - 1) % size, everything, reduce=False)])]


def _reduced(x, op, m):
    op = resolve(op)
    full = np.empty(x.size, x.dtype)
    m.Allreduce(np.ascontiguousarray(x).reshape(-1), full, library_op(op.reduction))
    if op is Op.AVG:
        full /= m.size
    return full


def _into(out, value):
    if out is None:
        return value.copy()
    out[...] = value.reshape(out.shape)
    return out


def reduce_scatter(x, out=None, *, op="sum", algorithm="auto", comm=None):
    m = pyar.Comm.of(comm).mpi
    return _into(out, np.array_split(_reduced(x, op, m), m.size)[m.rank])


def allgather(x, out=None, *, algorithm="auto", comm=None):
    m = pyar.Comm.of(comm).mpi
    gathered = np.empty((m.size, *x.shape), x.dtype)
    for root in range(m.size):              # one broadcast per rank, not MPI_Allgather
        if root == m.rank:
            gathered[root] = x
        m.Bcast(gathered[root], root=root)
    return _into(out, gathered)


def reduce(x, out=None, *, root=0, op="sum", algorithm="auto", comm=None):
    m = pyar.Comm.of(comm).mpi
    full = _reduced(x, op, m)
    return _into(out, full) if m.rank == root else None


def bcast(x, *, root=0, algorithm="auto", comm=None):
    m = pyar.Comm.of(comm).mpi
    everyone = np.empty((m.size, *x.shape), x.dtype)
    m.Allgather(np.ascontiguousarray(x), everyone)
    x[...] = everyone[root]
    return x


def alltoall(x, out=None, *, algorithm="auto", comm=None):
    m = pyar.Comm.of(comm).mpi
    send = np.array(x)
    received = np.empty_like(send)
    for peer in range(m.size):
        m.Sendrecv(send[peer], peer, 7, received[peer], peer, 7)
    return _into(out, received)


def run(mode, rest):
    split = rest.index("--")
    extra, args = rest[:split], rest[split + 1:]
    if mode == "broken":
        pyar.register_algorithm("copy_left")(copy_left)
        return main(["bench", *args])
    if mode == "no_torch":
        sys.modules["torch"] = None             # import torch now raises ImportError
        return main(["bench", *args])
    if mode == "stand_ins":
        status = 0
        for name in OTHERS:
            if not callable(getattr(pyar, name, None)):
                setattr(pyar, name, globals()[name])
            status = main(["bench", "--collective", name, "--json", f"{extra[0]}/{name}.json",
                           *args]) or status
        return status
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
