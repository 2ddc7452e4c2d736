# mpiexec -n 4 python -m mpi4py examples/zero_style.py
"""Allreduce the way ZeRO and FSDP split it: each rank reduce-scatters the
gradients, updates only its shard of the parameters, and allgathers the shards.

The sharded step must give every rank exactly the parameters a plain allreduce of the
gradients would have given it; this script checks that, then prints what each rank
kept (1/N of the optimizer state) and sent.
"""

import numpy as np
from mpi4py import MPI

import pyar

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size
rng = np.random.default_rng(rank)
params = np.linspace(-1, 1, 1000, dtype=np.float64)          # the same on every rank
grads = rng.standard_normal(params.size)                      # each rank's own gradients
lr = 0.1

# plain data parallel: everyone averages everything and updates everything
dense = params - lr * pyar.allreduce(grads, op="avg", algorithm="ring")

# ZeRO-style: average only my shard of the gradients, update only my shard, gather the shards
shard = pyar.reduce_scatter(grads, op="avg", algorithm="ring")        # my block, averaged
lo = sum(len(b) for b in np.array_split(params, size)[:rank])
mine = params[lo:lo + shard.size] - lr * shard
blocks = np.array_split(params, size)
width = len(blocks[0])                       # allgather takes equal shapes: pad the short shards
padded = np.zeros(width)
padded[:mine.size] = mine
gathered = pyar.allgather(padded, algorithm="ring")
sharded = np.concatenate([g[:len(b)] for g, b in zip(gathered, blocks)])

ok = np.allclose(sharded, dense, rtol=0, atol=1e-12)
ok = comm.allreduce(ok, MPI.LAND)
print(f"rank {rank}: kept {mine.size} of {params.size} parameters' optimizer state; "
      f"sharded update equals the allreduce one: {ok}")
assert ok
