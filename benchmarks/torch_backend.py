# mpiexec -n 2 python -m mpi4py benchmarks/torch_backend.py
"""``dist.all_reduce`` through the pyar backend (blocking, and ``async_op=True`` then
``wait()``) against gloo's and against ``pyar.allreduce`` on the same tensor, float32 sum in
place, 8 B to 64 MiB (``--max-bytes`` to stop sooner).

One job: gloo's default group (TCP port rank 0 picks) and a pyar group over the same ranks
(``new_group(backend="pyar")``); at each size the three take turns in batches (a barrier
before each), and a row gives each one's median time per call over its batches (the
slowest rank's) and the backend's overhead per blocking call, its time less ``pyar.allreduce``'s
(``pyar.allreduce(x, x)`` on the numpy array sharing the tensor's memory, on the group's
own :class:`pyar.Comm`). The tensor holds zeros, so repeated sums stay finite.
"""

import argparse
import socket
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI

import pyar
import pyar.torch

BATCHES = 5


def groups():
    comm = MPI.COMM_WORLD
    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    return dist.distributed_c10d._get_default_group(), dist.new_group(backend="pyar")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--max-bytes", type=int, default=64 << 20)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    gloo, ours = groups()
    if comm.rank == 0:
        print(f"dist.all_reduce, float32 sum in place, {comm.size} ranks; median us per call "
              f"over {BATCHES} batches (slowest rank)")
        print(f"{'bytes':>10} {'iters':>6} {'pyar backend':>13} {'async+wait':>11} "
              f"{'gloo':>10} {'pyar.allreduce':>15} {'overhead':>9}")
    nbytes = 8
    while nbytes <= args.max_bytes:
        t = torch.zeros(nbytes // 4)
        a = t.numpy()
        iters = max(3, min(300, (64 << 20) // (nbytes * 8)))
        runs = {"backend": lambda: dist.all_reduce(t, group=ours),
                "async": lambda: dist.all_reduce(t, group=ours, async_op=True).wait(),
                "gloo": lambda: dist.all_reduce(t, group=gloo),
                "pyar": lambda: pyar.allreduce(a, a, comm=ours.comm)}
        for f in runs.values():     # warm up: plans, connections
            f()
        times = {k: [] for k in runs}
        for _ in range(BATCHES):
            for name, f in runs.items():
                comm.Barrier()
                began = time.perf_counter()
                for _ in range(iters):
                    f()
                times[name].append((time.perf_counter() - began) / iters)
        med = {k: comm.allreduce(statistics.median(v), op=MPI.MAX) * 1e6
               for k, v in times.items()}
        assert not np.any(a), "the sums of zeros are not zero"
        if comm.rank == 0:
            print(f"{nbytes:>10} {iters:>6} {med['backend']:>13.1f} {med['async']:>11.1f} "
                  f"{med['gloo']:>10.1f} "
                  f"{med['pyar']:>15.1f} {med['backend'] - med['pyar']:>9.1f}", flush=True)
        nbytes *= 8 if nbytes < 8 << 20 else 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
