"""``torch:BACKEND`` as a ``pyar verify`` target: ``torch.distributed.all_reduce`` of a
process group of the job's ranks, on tensors sharing the case's arrays' memory.

:func:`allreduce` makes the group on first use (every rank of the job calls it together:
the worker resolves a target on every rank at a case's start): rank and size are
COMM_WORLD's, the rendezvous a ``torch.distributed.TCPStore`` on rank 0 whose port rank 0
broadcasts over MPI. One group a job, the default one, serving every case: unlike the
other targets, the case's fresh communicator is not the group's (a backend's state lives
as long as the job; the driver gives each torch target jobs of its own). nccl puts each
rank on GPU ``rank % device_count`` and copies in and out; the others reduce CPU tensors.

Ops: sum SUM, prod PRODUCT, max MAX, min MIN, avg AVG. A dtype torch has no tensor of is
NotImplementedError (unsupported, not failed); so is what the backend refuses to reduce
(a RuntimeError, ValueError or TypeError from ``all_reduce`` saying an invalid scalar type
or an unsupported op: gloo's ``Invalid scalar type`` for int16 and the unsigned types),
with the backend's words. Every rank sees the same refusal, as the case is the same on
every rank. Cost beyond the backend's: a copy of x where it is not C-contiguous or not in
place, and the result's copy into ``out``.

Importing this module imports torch and registers the backend ``"pyar"``; the worker loads
it by name (:func:`pyar.verify.worker.resolve`) only in a job of a torch target, so that
the other targets' jobs neither need torch nor pay for its import.
"""

from __future__ import annotations

import datetime
import re

import numpy as np
from mpi4py import MPI

from .. import torch as _registers_the_pyar_backend  # noqa: F401  (ImportError without torch)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

TIMEOUT = datetime.timedelta(seconds=60)        # the group's bound on every wait
# what a backend's refusal of a dtype or an op says (gloo, the MPI backend, nccl, pyar's)
REFUSAL = re.compile(r"invalid scalar type|unsupported|not supported|cannot use reduceop|"
                     r"does not support|no support|not implemented", re.IGNORECASE)
OPS = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN", "avg": "AVG"}
_groups = {}            # backend -> the torch device its tensors live on


def make(backend: str):
    """The target ``torch:backend``; the process group is made at the first call of
    :func:`group`."""
    def allreduce(x, comm, op="sum", out=None):
        return reduce(backend, x, op, out)
    return allreduce


def group(backend: str):
    """The device of the job's process group of ``backend``, made on first use (collective
    over COMM_WORLD then); ValueError where the backend cannot be used here."""
    if backend in _groups:
        return _groups[backend]
    if dist.is_initialized():
        raise ValueError(f"torch:{backend}: this job's process group is "
                         f"{dist.get_backend()}'s already (one backend a job)")
    if backend == "mpi" and not dist.is_mpi_available():
        raise ValueError("torch:mpi: this torch is built without its MPI backend "
                         "(torch.distributed.is_mpi_available() is False)")
    elif backend == "nccl" and not (torch.cuda.is_available() and dist.is_nccl_available()):
        raise ValueError("torch:nccl: needs a CUDA GPU and a torch built with NCCL")
    world = MPI.COMM_WORLD
    rank, size = world.Get_rank(), world.Get_size()
    if backend == "mpi":
        dist.init_process_group("mpi")
    else:
        store = dist.TCPStore("127.0.0.1", 0, size, is_master=True, timeout=TIMEOUT,
                              wait_for_workers=False) if rank == 0 else None
        port = world.bcast(store.port if store else None, root=0)
        if store is None:
            store = dist.TCPStore("127.0.0.1", port, size, is_master=False, timeout=TIMEOUT)
        dist.init_process_group(backend, store=store, rank=rank, world_size=size,
                                timeout=TIMEOUT)
    device = torch.device("cpu")
    if backend == "nccl":
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
    _groups[backend] = device
    return device


def tensor_of(a: np.ndarray):
    """A torch tensor sharing C-contiguous ``a``'s memory; NotImplementedError for a dtype
    torch has none of."""
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    try:
        return torch.from_numpy(a)
    except TypeError as e:
        raise NotImplementedError(f"torch has no tensor of {a.dtype}: {e}") from None


def reduce(backend: str, x: np.ndarray, op: str, out=None) -> np.ndarray:
    """``dist.all_reduce`` of x by ``op`` on the job's ``backend`` group (the contract of a
    ``pyar verify`` allreduce target)."""
    device = group(backend)
    if op not in OPS:
        raise NotImplementedError(f"torch.distributed has no ReduceOp for {op}")
    inplace = out is x and x.flags.c_contiguous
    work = x if inplace else np.array(x, order="C", copy=True)
    t = tensor_of(work)
    on = t if device.type == "cpu" else t.to(device)
    try:
        dist.all_reduce(on, op=getattr(dist.ReduceOp, OPS[op]))
    except (RuntimeError, ValueError, TypeError) as e:
        if REFUSAL.search(str(e)):
            raise NotImplementedError(f"torch:{backend} refuses {op} on {x.dtype}: "
                                      f"{str(e).splitlines()[0][:200]}") from None
        raise
    if on is not t:
        t.copy_(on.cpu())
    if out is None or inplace:
        return work
    out[...] = work
    return out
