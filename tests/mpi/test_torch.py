"""pyar.torch on real ranks: tensors in the collectives, and DDP with pyar's comm hook on the
pyar backend's process group (no gloo). Skipped without torch, and at other rank counts than
2 and 3 (each rank importing torch on these 2-core machines takes seconds)."""

from datetime import timedelta

import numpy as np
import pytest
from mpi4py import MPI

if MPI.COMM_WORLD.size not in (2, 3):
    pytest.skip("the torch tests run at 2 and 3 ranks", allow_module_level=True)
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import pyar  # noqa: E402
import pyar.integrations.torch as pt
import pyar.torch  # noqa: F401  (registers the backend)

from checks import agree  # noqa: E402


@pytest.fixture(scope="module")
def group():
    """The default process group on the pyar backend over the same ranks (MPI's rendezvous:
    no store, no port)."""
    dist.init_process_group("pyar", init_method="pyar://", timeout=timedelta(seconds=60))
    yield dist.distributed_c10d._get_default_group()
    dist.destroy_process_group()


def test_tensor_allreduce_matches_numpy(comm):
    x = torch.arange(10, dtype=torch.float32) * (comm.rank + 1) + 1000 * comm.rank
    y = pyar.allreduce(x)
    expect = pyar.allreduce(x.numpy().copy())
    agree(comm, isinstance(y, torch.Tensor) and np.array_equal(y.numpy(), expect))
    b = x.to(torch.bfloat16)
    assert pyar.allreduce(b, b) is b
    agree(comm, np.allclose(b.float().numpy(), expect, rtol=1e-2))
    r = pyar.ireduce(x, root=0)
    result = r.wait()
    agree(comm, (result is None) == (comm.rank != 0))


def model_and_data(comm, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    batches = [torch.randn(6, 8, generator=torch.Generator().manual_seed(100 * s + comm.rank))
               for s in range(steps)]
    return model, batches


def train_ddp(comm, hook_state, steps=6, returned=None):
    """A DDP model trained ``steps`` steps (with pyar's hook unless ``hook_state`` is False);
    its parameters and the number of collectives started through the process group after
    each step. ``returned``: a list to append whether each future the hook returned was
    complete."""
    model, batches = model_and_data(comm, steps)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)

    def hook(state, bucket) -> torch.futures.Future[torch.Tensor]:
        future = pt.comm_hook(state, bucket)
        returned.append(future.done())
        return future

    if hook_state is not False:
        ddp.register_comm_hook(hook_state, pt.comm_hook if returned is None else hook)
    group = dist.distributed_c10d._get_default_group()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    seqs = []
    for x in batches:
        opt.zero_grad()
        ddp(x).pow(2).mean().backward()
        opt.step()
        seqs.append(group.calls)
    return [p.detach().numpy().copy() for p in model.parameters()], seqs


def test_ddp_with_pyar_hook_equals_ddp_with_the_groups_allreduce(comm, group):
    theirs, calls = train_ddp(comm, False)
    agree(comm, calls[-1] > calls[1], f"DDP's own allreduces went past the group: {calls}")
    ours, calls = train_ddp(comm, None)
    agree(comm, all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(theirs, ours)),
          "pyar's hook trained other parameters than DDP's allreduce on the pyar backend")
    # the group is used for set-up only: DDP's second iteration broadcasts its rebuilt
    # bucket order; from then on no collective goes through the process group
    agree(comm, len(set(calls[1:])) == 1, f"collectives through the group per step: {calls}")


@pytest.mark.parametrize("spec", ["fp16", "int8", "topk:0.5"])
def test_ddp_hook_with_compression(comm, group, spec):
    """fp16 and int8 train nearly what the exact average does; top-k (half the gradients
    each step, the rest fed back) other parameters, the same on every rank."""
    theirs, _ = train_ddp(comm, False, steps=3)
    state = pt.HookState(compression=spec)
    ours, _ = train_ddp(comm, state, steps=3)
    off = max(float(np.abs(a - b).max() / np.abs(a).max()) for a, b in zip(theirs, ours))
    if spec != "topk:0.5":
        agree(comm, off < {"fp16": 1e-3, "int8": 2e-2}[spec], f"{spec}: off by {off}")
    agree(comm, (state.bytes_sent > 0) == (comm.size > 1), f"bytes {state.bytes_sent}")
    agree(comm, len(state.states) >= 1 and all((s.residual is None) == (spec == "fp16")
                                              for s in state.states.values()))
    mine = b"".join(p.tobytes() for p in ours)
    root = comm.bcast(mine if comm.rank == 0 else None)
    agree(comm, mine == root, f"{spec}: ranks hold different parameters")


@pytest.mark.parametrize("spec", [None, "fp16", "int8"])
def test_ddp_hook_with_a_progress_thread(comm, group, spec):
    """The hook returns before the average is done (one-phase transforms; int8's two phases
    run blocking), and inside pyar.Progress() training comes out as without it."""
    plain_returned = []
    plain, _ = train_ddp(comm, pt.HookState(compression=spec), steps=4,
                         returned=plain_returned)
    launched = []
    with pyar.Progress():
        threaded, _ = train_ddp(comm, pt.HookState(compression=spec), steps=4,
                                returned=launched)
    agree(comm, all(np.array_equal(a, b) for a, b in zip(plain, threaded)),
          f"{spec}: the threaded hook trained other parameters")
    agree(comm, all(all(f) if spec == "int8" else not all(f) for f in (plain_returned, launched)),
          f"futures complete when returned: {plain_returned} plain, {launched} threaded")
