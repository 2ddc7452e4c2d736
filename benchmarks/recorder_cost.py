# The flight recorder's cost on the 2-rank fast path (BENCHMARKS.md, "Flight recorder cost"):
# mpiexec -n 2 python benchmarks/recorder_cost.py (AB=1: also the same Comm with its recorder detached).
# 2 ranks: min-of-batches time per call of pyar.allreduce (auto, out of place) and comm.Allreduce,
# interleaved batch by batch; prints size, pyar us, mpi us, ratio. With AB=1 (observe only):
# also the same Comm with its recorder detached, batch by batch (the recorder's own cost).
import os, sys, time
import numpy as np
from mpi4py import MPI
import pyar
comm = MPI.COMM_WORLD
AB = os.environ.get("AB") == "1"
c = pyar.Comm.of(comm)
rec = getattr(c, "recorder", None)
for nbytes in (8, 16, 32, 64, 128, 256):
    x = np.ones(nbytes // 4, np.float32); out = np.empty_like(x)
    for _ in range(300): pyar.allreduce(x, out); comm.Allreduce(x, out)
    best = {"pyar": 1e9, "mpi": 1e9, "off": 1e9}
    for r in range(40):
        for kind in (("pyar", "mpi", "off") if AB else ("pyar", "mpi")):
            comm.Barrier()
            if kind == "off": c.recorder = None
            t = time.perf_counter()
            if kind == "mpi":
                for _ in range(200): comm.Allreduce(x, out)
            else:
                for _ in range(200): pyar.allreduce(x, out)
            dt = (time.perf_counter() - t) / 200
            if kind == "off": c.recorder = rec
            best[kind] = min(best[kind], dt)
    if comm.rank == 0:
        line = f"{nbytes} {best['pyar']*1e6:.2f} {best['mpi']*1e6:.2f} {best['pyar']/best['mpi']:.3f}"
        if AB: line += f" off {best['off']*1e6:.2f} ratio_off {best['off']/best['mpi']:.3f}"
        print(line, flush=True)
