# The repeated small allreduce's mean time per call (BENCHMARKS.md, "The repeated small allreduce"):
# PYTHONPATH=<a checkout> python pyar/runtime/launch.py -n 2 python benchmarks/small_call_cost.py LABEL
# prints LABEL, then per size: pyar out of place, in place, comm.Allreduce, min/median us over 5 rounds.
import sys, time
import numpy as np
from mpi4py import MPI
import pyar
comm = MPI.COMM_WORLD
N = 20000
out_line = []
for nbytes in (8, 1024):
    x = np.ones(nbytes // 4, np.float32); out = np.empty_like(x)
    for _ in range(3000): pyar.allreduce(x, out); comm.Allreduce(x, out)
    best = {"pyar": [], "ip": [], "mpi": []}
    for r in range(5):
        for kind in best:
            comm.Barrier()
            t = time.perf_counter()
            if kind == "mpi":
                for _ in range(N): comm.Allreduce(x, out)
            elif kind == "ip":
                for _ in range(N): pyar.allreduce(out, out)
            else:
                for _ in range(N): pyar.allreduce(x, out)
            dt = comm.allreduce((time.perf_counter() - t) / N, MPI.MAX)
            best[kind].append(dt * 1e6)
    if comm.rank == 0:
        out_line.append(f"{nbytes}B " + " ".join(f"{k} {min(v):.2f}/{np.median(v):.2f}" for k, v in best.items()))
if comm.rank == 0: print(sys.argv[1], " | ".join(out_line), flush=True)
