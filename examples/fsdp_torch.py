# mpiexec -n 2 python -m mpi4py examples/fsdp_torch.py
"""torch FSDP2 (``fully_shard``) on the pyar backend, on CPU: the same losses as on gloo.

The MLP of ``examples/ddp_torch.py`` (784-1024-256-10, 1.07M parameters), each Linear
sharded with ``fully_shard`` and the whole model too, learns a fixed random teacher's labels
on synthetic inputs (each rank its own batch of 32 per step, SGD lr 0.05) for 20 steps, once
on ``init_process_group("pyar")`` and once on gloo (a TCP port rank 0 picks). FSDP gathers
each layer's parameters with ``all_gather_into_tensor`` before its forward and backward and
averages the gradients with ``reduce_scatter_tensor``; on pyar both are pyar's collectives.
It prints each run's final loss and median step time (the first 5 steps left out) and
checks that on every rank each step's loss on pyar equals gloo's (rtol 1e-4).
"""

import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.distributed.fsdp import fully_shard

import pyar.torch  # noqa: F401  (registers the backend "pyar")

STEPS, WARMUP = 20, 5


def init(backend: str) -> None:
    if backend == "pyar":
        dist.init_process_group("pyar")
        return
    comm = MPI.COMM_WORLD
    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}",
                            rank=comm.rank, world_size=comm.size)


def train(backend: str):
    """(this rank's loss per step, step seconds after the warm-up)."""
    init(backend)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer)
        fully_shard(model)
        teacher = torch.randn(784, 10, generator=torch.Generator().manual_seed(1))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        rank, losses, seconds = dist.get_rank(), [], []
        for step in range(STEPS):
            x = torch.randn(32, 784, generator=torch.Generator().manual_seed(1000 * step + rank))
            began = time.perf_counter()
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), (x @ teacher).argmax(1))
            loss.backward()
            opt.step()
            seconds.append(time.perf_counter() - began)
            losses.append(loss.item())
        dist.barrier()      # every rank's calls done before the group goes
        return np.array(losses), seconds[WARMUP:]
    finally:
        dist.destroy_process_group()


def main() -> int:
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    runs = {}
    for backend in ("pyar", "gloo"):
        losses, seconds = train(backend)
        runs[backend] = losses
        step = comm.allreduce(statistics.median(seconds) * 1e3, op=MPI.MAX)
        loss = comm.allreduce(float(losses[-1])) / comm.size
        if comm.rank == 0:
            print(f"FSDP2 on {backend}: {comm.size} ranks, {STEPS} steps, final loss {loss:.4f}, "
                  f"median step {step:.2f} ms", flush=True)
    ok = np.allclose(runs["pyar"], runs["gloo"], rtol=1e-4, atol=1e-6)
    ok = comm.allreduce(int(ok), op=MPI.MIN)
    if comm.rank == 0:
        print("check: losses on pyar equal gloo's (rtol 1e-4) on every rank, every step" if ok
              else "FAILED: losses on pyar differ from gloo's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
