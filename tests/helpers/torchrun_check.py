"""Run by tests/unit/test_torch.py under torchrun, each worker an MPI job of one
(``torchrun --no-python ... mpiexec -n 1 python tests/helpers/torchrun_check.py``): the pyar
backend's world is joined through torch's store; an all_reduce, a group of ranks 0 and 1,
send/recv around the ring and a DDP step run on it. Prints ``torchrun check: rank R of N ok``."""

from datetime import timedelta

import torch
import torch.distributed as dist

import pyar.torch  # noqa: F401  (registers the backend)

dist.init_process_group("pyar", timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((1000,), size * (size + 1) / 2)), t[:3]
pair = dist.new_group([0, 1])
u = torch.full((3,), float(rank))
if rank < 2:
    dist.all_reduce(u, group=pair)
    assert torch.equal(u, torch.ones(3)), u
got = torch.empty(4)
works = [dist.irecv(got, (rank - 1) % size), dist.isend(torch.full((4,), float(rank)),
                                                        (rank + 1) % size)]
for w in works:
    w.wait()
assert torch.equal(got, torch.full((4,), float((rank - 1) % size))), got
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
torch.manual_seed(rank)
model(torch.randn(8, 4)).sum().backward()
grads = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
every = [torch.empty_like(grads) for _ in range(size)]
dist.all_gather(every, grads)
assert all(torch.equal(g, grads) for g in every), "DDP's gradients differ between ranks"
del model
dist.destroy_process_group()
print(f"torchrun check: rank {rank} of {size} ok", flush=True)
