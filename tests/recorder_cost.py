# The flight recorder's share of a repeated small allreduce (BENCHMARKS.md, "The flight
# recorder's share of a small call"):
# PYTHONPATH=<a checkout> python pyar/launch.py -n 2 python tests/recorder_cost.py
# prints per call, median / min us over 20 rounds of 5,000 calls (the slower rank's): pyar's
# 8 B in-place allreduce with its Comm's recorder set, then unset, then the library's call.
import functools
import time
import numpy as np
from mpi4py import MPI
import pyar
from pyar.comm import Comm

comm = MPI.COMM_WORLD
c = Comm.of(None)
x = np.zeros(2, np.float32)
calls = {"recorder on": functools.partial(pyar.allreduce, x, x),
         "recorder off": functools.partial(pyar.allreduce, x, x),
         "mpi": functools.partial(comm.Allreduce, MPI.IN_PLACE, [x, MPI.FLOAT], MPI.SUM)}
for _ in range(2000):
    calls["recorder on"]()
kept = c.recorder


def per_call(f, n=5000):
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return comm.allreduce(time.perf_counter() - t, MPI.MAX) / n


seen = {name: [] for name in calls}
for _ in range(20):
    for name, f in calls.items():
        c.recorder = None if name == "recorder off" else kept
        seen[name].append(per_call(f))
c.recorder = kept
if comm.rank == 0:
    print("  ".join(f"{k}: {np.median(v) * 1e6:.3f} / {min(v) * 1e6:.3f}" for k, v in seen.items()))
