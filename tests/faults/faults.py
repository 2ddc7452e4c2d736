"""Run under mpiexec (tests/faults/test_faults.py): the last rank misbehaves after some good
calls, and every rank reports what its call did. ``faults.py DIR SCENARIO...``: each on a
communicator of its own, its dumps in DIR/SCENARIO (PYAR_DUMP_DIR), each rank's report
there as row<R>.json: {"scenario", "rank", "error", "message", "seconds", "wrong", "shm"},
where seconds run from the rank's entering its faulty call to its error, wrong says that a
call returned a result that is not the reduction of what the ranks passed, and shm lists the
files in /dev/shm the rank has mapped and that are still linked (the MPI library's, pyar's
windows). A job of :data:`FINALIZED` scenarios only ends with MPI_Finalize; others leave
without it, their failed calls' MPI requests still posted (as in the field)."""

import json
import os
import sys
import time

import numpy as np
from mpi4py import MPI

import pyar
from pyar.runtime import notice

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
last = size - 1
TIMEOUT = float(os.environ["PYAR_TIMEOUT"])
FINALIZED = {"large_exit"}      # scenarios whose failed calls leave no MPI request posted
LARGE = 1 << 18     # float32 elements: a large plan (a Stream, reading the peers' memory where
                    # the node allows, on one node), after a first good call of it


def data(r, n=4, dtype=np.float32):
    return ((r + 1) * 1000 + np.arange(n)).astype(dtype)


def allreduce(comm, n=4, dtype=np.float32, op="sum", timeout=None):
    out = pyar.allreduce(data(rank, n, dtype), op=op, comm=comm, timeout=timeout)
    every = np.stack([data(r, n, dtype) for r in range(size)])
    expected = every.sum(0) if op == "sum" else every.max(0)
    return bool(np.any(out != expected.astype(dtype)))


def bcast(comm, root=0, timeout=None):
    y = data(rank)
    pyar.bcast(y, root=root, comm=comm, timeout=timeout)
    return bool(np.any(y != data(root)))


def fault(name, comm):
    """This rank's calls in scenario ``name``; whether a result came back wrong."""
    culprit = rank == last
    if name == "skip":                  # the last rank skips an allreduce
        return (False if culprit else allreduce(comm)) or bcast(comm)
    if name == "order":                 # ... calls the two in the other order
        if culprit:
            return bcast(comm) or allreduce(comm)
        return allreduce(comm) or bcast(comm)
    if name == "sleep":                 # ... comes past the others' timeout
        if culprit:
            time.sleep(TIMEOUT + 1.5)
        return allreduce(comm)
    if name == "large_sleep":           # ... mid-way through large calls
        wrong = allreduce(comm, n=LARGE, timeout=60)
        if culprit:
            time.sleep(TIMEOUT + 1.5)
        return allreduce(comm, n=LARGE) or wrong
    if name == "large_count":
        wrong = allreduce(comm, n=LARGE, timeout=60)
        return allreduce(comm, n=LARGE + 4 if culprit else LARGE) or wrong
    if name == "count":                 # after first good calls, different arguments:
        return allreduce(comm, n=5 if culprit else 4)
    if name == "dtype":                 # ... a dtype of the same size
        return allreduce(comm, dtype=np.int32 if culprit else np.float32)
    if name == "dtype64":               # ... another size
        return allreduce(comm, dtype=np.float64 if culprit else np.float32)
    if name == "op":
        return allreduce(comm, op="max" if culprit else "sum")
    if name == "root":
        return bcast(comm, root=1 if culprit else 0)
    if name == "exit":                  # the last rank leaves early (and MPI_Finalize)
        if culprit:
            sys.exit(0)
        return allreduce(comm)
    if name == "large_exit":            # ... leaves with its large call in flight, its
        wrong = allreduce(comm, n=LARGE, timeout=60)    # message offered from its memory
        if culprit:
            request = pyar.iallreduce(data(rank, LARGE), comm=comm)
            request.test()
            sys.exit(0)
        return allreduce(comm, n=LARGE) or wrong
    if name == "kill":
        if culprit:
            os.kill(os.getpid(), 9)
        return allreduce(comm)
    if name == "raise":                 # under python -m mpi4py: nothing caught
        return allreduce(comm, n=5 if culprit else 4)
    raise SystemExit(f"unknown scenario {name!r}")


def scenario(folder, name):
    os.environ["PYAR_DUMP_DIR"] = os.path.join(folder, name)
    base = world.Dup()
    comm = pyar.Comm(base)
    allreduce(comm, timeout=60)         # first good calls (kernels loaded, mailboxes made:
    bcast(comm, timeout=60)             # slow on a loaded machine), plans cached; then
    allreduce(comm)                     # the fast path
    allreduce(comm)
    world.Barrier()
    error, message, wrong, began = None, "", False, time.monotonic()
    if name == "raise":
        fault(name, comm)
    try:
        wrong = fault(name, comm)
    except pyar.PyarError as e:
        error, message = type(e).__name__, str(e)
    with open("/proc/self/maps") as maps:
        shm = sorted({line.split(None, 5)[5].strip() for line in maps if " /dev/shm/" in line
                      and not line.rstrip().endswith("(deleted)")})
    row = {"scenario": name, "rank": rank, "error": error, "message": message,
           "seconds": time.monotonic() - began, "wrong": wrong, "shm": shm}
    folder = os.path.join(folder, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"row{rank}.json"), "w") as f:
        json.dump(row, f)
    if name in ("exit", "large_exit"):  # (one rank has gone: no barrier, no freeing)
        return
    world.Barrier()                     # every scenario is bounded: all ranks come here
    drain = time.monotonic() + 0.2      # the failed call's notices, before the next scenario
    while time.monotonic() < drain:
        try:
            notice.poll(0.0)
        except pyar.PyarError:
            pass
    world.Barrier()


for each in sys.argv[2:]:
    scenario(sys.argv[1], each)
sys.stdout.flush()
if FINALIZED.issuperset(sys.argv[2:]):
    sys.exit(0)
os._exit(0)     # not MPI_Finalize: the failed calls' requests are still posted (as in the field)
