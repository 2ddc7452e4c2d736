# mpiexec -n 2 python -m mpi4py examples/ddp_torch.py
"""torch DistributedDataParallel on the pyar backend: ``init_process_group("pyar")``, no gloo.

A 1.07M-parameter MLP (784-1024-256-10, ReLU) learns a fixed random teacher's labels on
synthetic inputs: each rank draws its own batch of 32 per step, DDP averages the gradients,
SGD (lr 0.05) steps. The same training runs once per backend (``--backends``, default
``pyar,gloo``: gloo's group on a TCP port rank 0 picks), and per compression
(``--compression none,fp16``: fp16 is pyar's comm hook, ``pyar.torch.comm_hook`` with
``HookState(compression="fp16")``, on the pyar backend, and torch's ``fp16_compress_hook``
on gloo) and bucket size (``--bucket-cap-mb``, default 25). It prints each run's final
loss and median step time (forward, backward with DDP's bucket allreduces, optimizer
step; the first 5 steps left out) and checks (``--no-check`` to skip) that

- on every rank the losses of every step on pyar equal gloo's within float rounding
  (rtol 1e-4: at 3 ranks and more the two sum in other orders), for each compression;
- the parameters at the end are bitwise identical on every rank, on each backend.

torch runs one thread per rank (``torch.set_num_threads(1)``), so that the ranks of one
machine do not take each other's cores. The backend's start is two lines::

    import pyar.torch
    torch.distributed.init_process_group("pyar")
"""

import argparse
import datetime
import statistics
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
from mpi4py import MPI
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import pyar.torch

WARMUP = 5      # steps left out of the step time
STORE_TIMEOUT = datetime.timedelta(seconds=120)  # gloo's rendezvous, calls: an error, not a hang


def init(backend: str) -> None:
    """The default process group on ``backend``: pyar's rendezvous is MPI's; gloo's a TCP
    store rank 0 opens on a port of its own choosing (held from the start: no other
    process can take it in between) and broadcasts over MPI."""
    if backend == "pyar":
        dist.init_process_group("pyar")
        return
    comm = MPI.COMM_WORLD
    store = dist.TCPStore("127.0.0.1", 0, comm.size, is_master=True, timeout=STORE_TIMEOUT,
                          wait_for_workers=False) if comm.rank == 0 else None
    port = comm.bcast(store.port if store else None)
    if store is None:
        store = dist.TCPStore("127.0.0.1", port, comm.size, is_master=False,
                              timeout=STORE_TIMEOUT)
    dist.init_process_group(backend, store=store, rank=comm.rank, world_size=comm.size,
                            timeout=STORE_TIMEOUT)


def model_and_teacher():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                                torch.nn.Linear(1024, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    teacher = torch.randn(784, 10, generator=torch.Generator().manual_seed(1))
    return model, teacher


def batch(step: int, rank: int, teacher):
    x = torch.randn(32, 784, generator=torch.Generator().manual_seed(1000 * step + rank))
    return x, (x @ teacher).argmax(1)


def train(backend: str, compression: str, bucket_cap_mb: float, steps: int):
    """(losses per step on this rank, step seconds, this rank's parameters' bytes) of
    :func:`train_ddp` on a default group of ``backend``, made for the run and destroyed
    after it."""
    init(backend)
    try:
        result = train_ddp(backend, compression, bucket_cap_mb, steps)
        dist.barrier()      # every rank's calls done before the group goes
        return result
    finally:
        dist.destroy_process_group()


def train_ddp(backend: str, compression: str, bucket_cap_mb: float, steps: int):
    """``steps`` steps of DDP on the default group. The DDP module ends with this call,
    before its group: its C++ Reducer holds a reference to the group, and a gloo group
    whose last reference the Reducer drops is destroyed in the Reducer's destructor, which
    holds the GIL while it joins gloo's worker threads. A worker still releasing a finished
    call's Python state waits for the GIL meanwhile: a deadlock in torch (docs/torch.md,
    Limits). ``destroy_process_group`` drops the last reference instead, through a binding
    that releases the GIL."""
    model, teacher = model_and_teacher()
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_cap_mb)
    if compression == "fp16" and backend == "pyar":
        group = dist.distributed_c10d._get_default_group()
        ddp.register_comm_hook(pyar.torch.HookState(comm=group.comm, compression="fp16"),
                               pyar.torch.comm_hook)
    elif compression == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    losses, seconds = [], []
    rank = dist.get_rank()
    for step in range(steps):
        x, y = batch(step, rank, teacher)
        began = time.perf_counter()
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        opt.step()
        seconds.append(time.perf_counter() - began)
        losses.append(loss.item())
    params = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    return np.array(losses), seconds[WARMUP:], params


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backends", default="pyar,gloo")
    p.add_argument("--compression", default="none,fp16")
    p.add_argument("--bucket-cap-mb", default="25")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--no-check", dest="check", action="store_false")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    backends = args.backends.split(",")
    runs = {}
    if comm.rank == 0:
        params = sum(p.numel() for p in model_and_teacher()[0].parameters())
        print(f"DDP, {params} parameters, {comm.size} ranks, {args.steps} steps, batch 32 "
              f"per rank; median step time after {WARMUP} steps")
        print(f"{'backend':>8} {'compression':>11} {'bucket MB':>9} {'final loss':>10} "
              f"{'step ms':>8}")
    for cap in (float(c) for c in args.bucket_cap_mb.split(",")):
        for compression in args.compression.split(","):
            for backend in backends:
                losses, seconds, params = train(backend, compression, cap, args.steps)
                runs[backend, compression, cap] = losses, params
                step = statistics.median(seconds) * 1e3
                slowest = comm.allreduce(step, op=MPI.MAX)
                mean_loss = comm.allreduce(float(losses[-1])) / comm.size
                if comm.rank == 0:
                    print(f"{backend:>8} {compression:>11} {cap:>9g} {mean_loss:>10.4f} "
                          f"{slowest:>8.2f}", flush=True)
    if not args.check:
        return 0
    failures = []
    for (backend, compression, cap), (losses, params) in runs.items():
        if len(set(comm.allgather(params))) != 1:
            failures.append(f"{backend} {compression} {cap:g} MB: parameters differ between "
                            f"the ranks")
        if backend != "pyar" and ("pyar", compression, cap) in runs:
            ours = runs["pyar", compression, cap][0]
            if not np.allclose(ours, losses, rtol=1e-4, atol=1e-6):
                off = float(np.max(np.abs(ours - losses) / np.abs(losses)))
                failures.append(f"{compression} {cap:g} MB: pyar's losses differ from "
                                f"{backend}'s by up to {off:.2e} (relative)")
    failures = sorted(set(sum(comm.allgather(failures), [])))
    if comm.rank == 0:
        for f in failures:
            print("FAILED:", f)
        if not failures:
            print(f"check: losses on pyar equal {', '.join(b for b in backends if b != 'pyar')}"
                  f"'s (rtol 1e-4) on every rank, every step; parameters bitwise identical "
                  f"on every rank")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
