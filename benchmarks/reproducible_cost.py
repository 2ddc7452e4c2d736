# The cost of allreduce(reproducible=True) against the default, float32 sum, auto's algorithm:
# python pyar/runtime/launch.py -n 2 python -m mpi4py benchmarks/reproducible_cost.py [SIZES]
# (SIZES: bytes, comma-separated, K and M suffixes; default 8,1M,64M) prints per size: the default's and the reproducible call's time (min / median ms over rounds,
# the two taking turns), their ratio of minima, and the wire bytes of each (18 against 4 per
# element).
import sys
import time

import numpy as np
from mpi4py import MPI

import pyar

comm = MPI.COMM_WORLD
ROUNDS = 7


def timed(call, iters):
    comm.Barrier()
    t = time.perf_counter()
    for _ in range(iters):
        call()
    return comm.allreduce((time.perf_counter() - t) / iters, MPI.MAX) * 1e3


def nbytes_of(word: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20}.get(word[-1:].upper(), 1)
    return int(word[:-1] if scale > 1 else word) * scale


if comm.rank == 0:
    print(f"# allreduce float32 sum, auto, {comm.size} ranks: default against reproducible=True")
    print(f"# {'size':>8}  {'default ms (min/med)':>22}  {'reproducible ms':>22}  {'ratio':>6}")


for nbytes in map(nbytes_of, (sys.argv[1] if len(sys.argv) > 1 else "8,1M,64M").split(",")):
    x = np.random.default_rng(comm.rank).standard_normal(nbytes // 4).astype(np.float32)
    out = np.empty_like(x)
    iters = 2000 if nbytes <= 8 else 20 if nbytes <= 1 << 20 else 2
    runs = {"default": lambda: pyar.allreduce(x, out),
            "reproducible": lambda: pyar.allreduce(x, out, reproducible=True)}
    for call in runs.values():
        timed(call, max(1, iters // 4))
    times = {k: [] for k in runs}
    for _ in range(ROUNDS):
        for k, call in runs.items():
            times[k].append(timed(call, iters))
    if comm.rank == 0:
        cells = [f"{min(v):10.4f} / {np.median(v):9.4f}" for v in times.values()]
        size = f"{nbytes} B" if nbytes < 1024 else f"{nbytes >> 10} KiB" if nbytes < 1 << 20 else \
            f"{nbytes >> 20} MiB"
        print(f"  {size:>8}  {cells[0]:>22}  {cells[1]:>22}  "
              f"{min(times['reproducible']) / min(times['default']):6.2f}", flush=True)
