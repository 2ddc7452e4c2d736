"""The torch.distributed backend "pyar" on real ranks, against gloo in the same job: every
collective x dtype x op x async_op x in place / out of place, uneven all_to_all_single,
new_group of a subset, send/recv, errors for mismatched calls (on every rank, no hang), the
rendezvous's checks. Skipped without torch, and at other rank counts than 2 and 3 (each
rank importing torch on these 2-core machines takes seconds).

The oracle is gloo's own collective on the same inputs (the default group, set up on a TCP
port); where gloo refuses a dtype or op (AVG; some dtypes), the reference is reduced here
from every rank's input, gathered through gloo."""

import socket
from datetime import timedelta

import numpy as np
import pytest
from mpi4py import MPI

if MPI.COMM_WORLD.size not in (2, 3):
    pytest.skip("the torch tests run at 2 and 3 ranks", allow_module_level=True)
torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402

import pyar.torch  # noqa: E402,F401  (registers the backend)

from checks import agree  # noqa: E402

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int32,
          torch.int64, torch.uint8, torch.bool]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.AVG, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
       dist.ReduceOp.MAX]
SECONDS = 30            # the pyar groups' timeout: a hang is an error within this


def ops_for(dtype):
    """AVG is for floating dtypes (pyar's rule; gloo has no AVG at all)."""
    if not dtype.is_floating_point:
        return [op for op in OPS if op != dist.ReduceOp.AVG]
    return OPS


def data(dtype, shape, seed, op=None):
    """A tensor of ``shape`` for ``seed`` (a rank's input): small values, near 1 for
    PRODUCT, so that no reduction overflows."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        if op == dist.ReduceOp.PRODUCT:
            return (0.5 + torch.rand(shape, generator=g, dtype=torch.float64)).to(dtype)
        return (4 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)
    low = 1 if op == dist.ReduceOp.PRODUCT else 0
    return torch.randint(low, 4, shape, generator=g).to(dtype)


def close(ours, theirs) -> bool:
    """Equal for integers and bool; within the dtype's rounding (the ranks' values folded in
    other orders, half types through float32 in pyar) for floats."""
    if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
        return False
    if not ours.dtype.is_floating_point:
        return torch.equal(ours, theirs)
    tol = {torch.float16: 2e-3, torch.bfloat16: 1.6e-2, torch.float32: 1e-5,
           torch.float64: 1e-12}[ours.dtype]
    return torch.allclose(ours.double(), theirs.double(), rtol=tol, atol=tol)


def same_everywhere(comm, t) -> bool:
    """Whether ``t`` holds the same bytes on every rank."""
    mine = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
    return len(set(comm.allgather(mine))) == 1


def free_port(comm) -> int:
    """A TCP port free on rank 0 now, on every rank."""
    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    return comm.bcast(port)


@pytest.fixture(scope="module")
def groups():
    """(gloo, pyar): gloo's default group over COMM_WORLD (rendezvous on a port rank 0
    picked) and a pyar group over the same ranks (``new_group(backend="pyar")``)."""
    comm = MPI.COMM_WORLD
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port(comm)}",
                            rank=comm.rank, world_size=comm.size)
    ours = dist.new_group(backend="pyar", timeout=timedelta(seconds=SECONDS))
    yield dist.distributed_c10d._get_default_group(), ours
    dist.destroy_process_group()


def reference(gloo, name, inputs_of, op, dtype, root=0):
    """What ``name`` gives, reduced here in float64 from every rank's input (``inputs_of(r)``)
    where gloo refuses the call itself."""
    xs = [inputs_of(r) for r in range(dist.get_world_size())]
    if dtype == torch.bool:
        stack = torch.stack([x.to(torch.uint8) for x in xs])
        fold = {dist.ReduceOp.SUM: stack.amax(0), dist.ReduceOp.MAX: stack.amax(0),
                dist.ReduceOp.PRODUCT: stack.amin(0), dist.ReduceOp.MIN: stack.amin(0)}
        return fold[op].bool()
    stack = torch.stack([x.double() for x in xs])
    if op == dist.ReduceOp.SUM:
        y = stack.sum(0)
    elif op == dist.ReduceOp.AVG:
        y = stack.mean(0)
    elif op == dist.ReduceOp.PRODUCT:
        y = stack.prod(0)
    elif op == dist.ReduceOp.MIN:
        y = stack.amin(0)
    else:
        y = stack.amax(0)
    return y.to(dtype)


def oracle(gloo, run_gloo, fallback):
    """gloo's result (``run_gloo()``), or ``fallback()`` where gloo refuses the call (a
    RuntimeError or ValueError on every rank alike)."""
    try:
        return run_gloo()
    except (RuntimeError, ValueError):
        return fallback()


# -- the rendezvous and the default group ---------------------------------------------------

def test_init_process_group_takes_mpis_ranks_and_refuses_others(comm):
    assert not dist.is_initialized()
    wrong = (comm.rank + 1) % comm.size
    with pytest.raises(ValueError, match="MPI runs this process as rank"):
        dist.init_process_group("pyar", init_method="pyar://", rank=wrong,
                                world_size=comm.size)
    agree(comm, not dist.is_initialized())
    dist.init_process_group("pyar", init_method="pyar://", timeout=timedelta(seconds=SECONDS))
    try:
        agree(comm, dist.get_backend() == "pyar" and dist.get_rank() == comm.rank
              and dist.get_world_size() == comm.size)
        group = dist.distributed_c10d._get_default_group()
        agree(comm, isinstance(group, pyar.torch.ProcessGroupPyar) and group.timeout == SECONDS)
        t = torch.full((5,), float(comm.rank + 1))
        dist.all_reduce(t)
        agree(comm, torch.equal(t, torch.full((5,), comm.size * (comm.size + 1) / 2)))
    finally:
        dist.destroy_process_group()


def test_env_rendezvous_works_and_ranks_disagreeing_with_mpi_are_refused(comm, monkeypatch):
    """Under torchrun's variables (env://, torch's TCP store) the backend runs too; a RANK
    that is not MPI's rank is a ValueError on every rank, naming both."""
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("WORLD_SIZE", str(comm.size))
    monkeypatch.setenv("MASTER_PORT", str(free_port(comm)))
    monkeypatch.setenv("RANK", str((comm.rank + 1) % comm.size))
    with pytest.raises(ValueError, match=f"torch gave rank {(comm.rank + 1) % comm.size} of "
                                         f"{comm.size}, MPI has rank {comm.rank}"):
        dist.init_process_group("pyar", timeout=timedelta(seconds=SECONDS))
    agree(comm, not dist.is_initialized())
    monkeypatch.setenv("MASTER_PORT", str(free_port(comm)))     # (a fresh store)
    monkeypatch.setenv("RANK", str(comm.rank))
    dist.init_process_group("pyar", timeout=timedelta(seconds=SECONDS))
    try:
        t = torch.ones(3)
        dist.all_reduce(t)
        agree(comm, dist.get_backend() == "pyar" and torch.equal(t, torch.full((3,), 1.0 *
                                                                           comm.size)))
    finally:
        dist.destroy_process_group()


def test_the_bare_init_takes_mpis_ranks_and_a_store_gloo_groups_share(comm, monkeypatch):
    """``init_process_group("pyar")`` with none of torchrun's variables (torch's default
    env://): MPI's ranks, a TCP store rank 0 serves, on which a gloo group works too; a
    rank passed that is not MPI's is a ValueError on every rank."""
    for name in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    wrong = (comm.rank + 1) % comm.size
    if comm.size > 1:
        with pytest.raises(ValueError, match="MPI runs this process as rank"):
            dist.init_process_group("pyar", rank=wrong, world_size=comm.size)
        agree(comm, not dist.is_initialized())
    dist.init_process_group("pyar", timeout=timedelta(seconds=SECONDS))
    try:
        t = torch.full((4,), float(comm.rank + 1))
        dist.all_reduce(t)
        gloo = dist.new_group(backend="gloo")
        u = torch.ones(2)
        dist.all_reduce(u, group=gloo)
        agree(comm, dist.get_backend() == "pyar" and dist.get_rank() == comm.rank and
              torch.equal(t, torch.full((4,), comm.size * (comm.size + 1) / 2)) and
              torch.equal(u, torch.full((2,), float(comm.size))))
    finally:
        dist.destroy_process_group()


def test_a_default_group_made_again_after_a_failed_one_works(comm):
    """A default group whose barrier timed out (rank 0 alone in it), destroyed, then made
    again on the same ranks: the new group is a communicator of its own, usable."""
    dist.init_process_group("pyar", init_method="pyar://", timeout=timedelta(seconds=1))
    try:
        if comm.rank == 0:
            with pytest.raises(dist.DistBackendError, match="Timed out \\(TimeoutError\\)"):
                dist.barrier()
        comm.Barrier()
    finally:
        dist.destroy_process_group()
    dist.init_process_group("pyar", init_method="pyar://", timeout=timedelta(seconds=SECONDS))
    try:
        t = torch.ones(3)
        dist.all_reduce(t)
        agree(comm, torch.equal(t, torch.full((3,), float(comm.size))))
    finally:
        dist.destroy_process_group()


# -- the collectives against gloo -----------------------------------------------------------

def check_reduction(comm, what, ours, theirs):
    agree(comm, close(ours, theirs), f"{what}: pyar {ours} gloo {theirs}")


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_reduce(comm, groups, dtype):
    gloo, pg = groups
    for op in ops_for(dtype):
        for async_op in (False, True):
            what = f"all_reduce {dtype} {op} async_op={async_op}"

            def x(r, op=op):
                return data(dtype, (3, 5), 10 * r + 1, op)
            ours = x(comm.rank)
            work = dist.all_reduce(ours, op=op, group=pg, async_op=async_op)
            if async_op:
                agree(comm, work.wait(), what)
            theirs = oracle(gloo, lambda: (lambda t: (dist.all_reduce(t, op=op), t)[1])(
                x(comm.rank)), lambda: reference(gloo, "all_reduce", x, op, dtype))
            check_reduction(comm, what, ours, theirs)
            agree(comm, same_everywhere(comm, ours), f"{what}: ranks differ")


def test_all_reduce_of_a_non_contiguous_tensor_and_its_future(comm, groups):
    _, pg = groups
    base = torch.arange(20, dtype=torch.float32).reshape(4, 5) + comm.rank
    view = base[:, 1::2]
    expect = view * comm.size + sum(range(comm.size)) - comm.rank * comm.size
    fut = dist.all_reduce(view, group=pg, async_op=True).get_future()
    value = fut.wait()
    agree(comm, torch.equal(view, expect) and torch.equal(base[:, 0::2],
                                                          (torch.arange(20.).reshape(4, 5)
                                                           + comm.rank)[:, 0::2]))
    agree(comm, isinstance(value, list) and value[0] is view)


def cached(pg, dtype, count, op="sum"):
    """The group's cached requests for an allreduce signature (none: an empty list)."""
    entry = pg.requests.kept.get((dtype, count, op))
    return [] if entry is None else [slot.request for slot in entry[0]]


def test_all_reduce_reuses_its_signatures_requests(comm, groups):
    """A signature's calls start the request its first call made; another count, dtype or op
    makes its own; every result right."""
    from pyar.integrations.torch_requests import SLOTS
    _, pg = groups
    n, count = comm.size, 37
    for i in range(3):
        t = torch.full((count,), float(comm.rank + i))
        dist.all_reduce(t, group=pg)
        agree(comm, torch.equal(t, torch.full((count,), float(n * i + sum(range(n))))), t)
    first = cached(pg, torch.float32, count)
    agree(comm, len(first) == 1, first)
    works = [dist.all_reduce(torch.ones(count), group=pg, async_op=True)
             for _ in range(SLOTS + 1)]
    for w in works:
        w.wait()
    every = cached(pg, torch.float32, count)
    agree(comm, len(every) == SLOTS and every[0] is first[0], every)
    dist.all_reduce(torch.ones(count + 1), group=pg)
    dist.all_reduce(torch.ones(count, dtype=torch.float64), group=pg)
    dist.all_reduce(torch.ones(count), op=dist.ReduceOp.MAX, group=pg)
    agree(comm, all(len(cached(pg, *s)) == 1 for s in [
        (torch.float32, count + 1), (torch.float64, count), (torch.float32, count, "max")]))
    agree(comm, cached(pg, torch.float32, count) == every, "a signature's requests changed")


def test_all_reduces_of_one_signature_in_flight_together_are_each_right(comm, groups):
    """Five async all_reduces of one signature in flight at once (more than its requests:
    a call whose request is still in flight waits for it first), waited for in reverse,
    some through their futures, with a blocking one of the same signature amid them, on
    tensors of other shapes and layouts: every result right."""
    _, pg = groups
    n = comm.size
    total = sum(range(n))
    xs = [torch.full((6,), float(10 * i + comm.rank)) for i in range(5)]
    xs[3] = torch.full((2, 3), float(30 + comm.rank))
    xs[4] = torch.full((3, 4), float(40 + comm.rank))[:, ::2]        # 6 elements, strided
    works = [dist.all_reduce(x, group=pg, async_op=True) for x in xs[:3]]
    futures = [w.get_future() for w in works[:2]]
    y = torch.full((6,), float(comm.rank))
    dist.all_reduce(y, group=pg)
    works += [dist.all_reduce(x, group=pg, async_op=True) for x in xs[3:]]
    for w in works[::-1]:
        w.wait()
    for f in futures:
        f.wait()
    for i, x in enumerate(xs):
        agree(comm, torch.equal(x, torch.full(x.shape, float(n * 10 * i + total))), (i, x))
    agree(comm, torch.equal(y, torch.full((6,), float(total))), y)


def test_all_reduce_of_sparse_tensors(comm, groups):
    """Sparse COO tensors (a different pattern and count on each rank, one rank's empty)
    summed in place as gloo sums them."""
    gloo, pg = groups
    n, me = comm.size, comm.rank

    def mine():
        rows = list(range(me, 6, n)) if me else []
        return torch.sparse_coo_tensor([rows], torch.ones(len(rows), 2) * (me + 1), (6, 2))
    ours, theirs = mine(), mine()
    dist.all_reduce(ours, group=pg)
    dist.all_reduce(theirs, group=gloo)
    agree(comm, ours.is_sparse and torch.equal(ours.to_dense(), theirs.to_dense()))
    with pytest.raises(ValueError, match="SUM only"):
        dist.all_reduce(mine(), op=dist.ReduceOp.MAX, group=pg)


def test_all_reduce_coalesced(comm, groups):
    gloo, pg = groups
    for op in OPS[:1] + OPS[2:]:
        ours = [data(torch.float32, s, 7 * comm.rank + i, op) for i, s in
                enumerate([(3,), (2, 2), (5,)])]
        theirs = [t.clone() for t in ours]
        dist.all_reduce_coalesced(ours, op=op, group=pg)
        dist.all_reduce_coalesced(theirs, op=op, group=gloo)
        agree(comm, all(close(a, b) for a, b in zip(ours, theirs)), f"coalesced {op}")


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_broadcast_reduce_gather_scatter(comm, groups, dtype):
    gloo, pg = groups
    n = comm.size
    for root in sorted({0, n - 1}):
        for async_op in (False, True):
            what = f"{dtype} root {root} async_op={async_op}"
            ours, theirs = data(dtype, (7,), comm.rank), data(dtype, (7,), comm.rank)
            w = dist.broadcast(ours, root, group=pg, async_op=async_op)
            if async_op:
                w.wait()
            dist.broadcast(theirs, root, group=gloo)
            agree(comm, torch.equal(ours, theirs), f"broadcast {what}")

            for op in ops_for(dtype):
                def x(r, op=op):
                    return data(dtype, (2, 3), 5 * r + 3, op)
                ours = x(comm.rank)
                w = dist.reduce(ours, root, op=op, group=pg, async_op=async_op)
                if async_op:
                    w.wait()
                if comm.rank == root:
                    theirs = oracle(gloo, lambda: (lambda t: (dist.reduce(t, root, op=op), t)[1])(
                        x(comm.rank)), lambda: reference(gloo, "reduce", x, op, dtype))
                    ok = close(ours, theirs)
                else:
                    oracle(gloo, lambda: dist.reduce(x(comm.rank), root, op=op), lambda: None)
                    ok = True
                agree(comm, ok, f"reduce {op} {what}: {ours}")

            x = data(dtype, (4,), comm.rank + 20)
            outs = [torch.empty(4, dtype=dtype) for _ in range(n)] if comm.rank == root else None
            w = dist.gather(x, outs, dst=root, group=pg, async_op=async_op)
            if async_op:
                w.wait()
            expect = [data(dtype, (4,), r + 20) for r in range(n)]
            agree(comm, comm.rank != root or all(torch.equal(a, b)
                                                 for a, b in zip(outs, expect)),
                  f"gather {what}")

            ins = [data(dtype, (4,), 30 + r) for r in range(n)] if comm.rank == root else None
            out = torch.empty(4, dtype=dtype)
            w = dist.scatter(out, ins, src=root, group=pg, async_op=async_op)
            if async_op:
                w.wait()
            agree(comm, torch.equal(out, data(dtype, (4,), 30 + comm.rank)), f"scatter {what}")


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_all_gather_and_all_to_all(comm, groups, dtype):
    gloo, pg = groups
    n, me = comm.size, comm.rank
    for async_op in (False, True):
        what = f"{dtype} async_op={async_op}"
        x = data(dtype, (2, 3), me + 40)
        ours = [torch.empty(2, 3, dtype=dtype) for _ in range(n)]
        theirs = [torch.empty(2, 3, dtype=dtype) for _ in range(n)]
        w = dist.all_gather(ours, x, group=pg, async_op=async_op)
        if async_op:
            w.wait()
        dist.all_gather(theirs, x, group=gloo)
        agree(comm, all(torch.equal(a, b) for a, b in zip(ours, theirs)), f"all_gather {what}")

        for in_place in (False, True):
            expect = torch.cat([data(dtype, (6,), r + 50) for r in range(n)])
            out = torch.empty(6 * n, dtype=dtype)
            if in_place:                            # the input a slice of the output
                out[6 * me:6 * (me + 1)] = data(dtype, (6,), me + 50)
                x = out[6 * me:6 * (me + 1)]
            else:
                x = data(dtype, (6,), me + 50)
            w = dist.all_gather_into_tensor(out, x, group=pg, async_op=async_op)
            if async_op:
                w.wait()
            agree(comm, torch.equal(out, expect), f"all_gather_into_tensor {what} "
                                                  f"in_place={in_place}")

            src = torch.cat([data(dtype, (3,), 100 * me + j) for j in range(n)])
            expect = torch.cat([data(dtype, (3,), 100 * r + me) for r in range(n)])
            out = src if in_place else torch.empty(3 * n, dtype=dtype)
            w = dist.all_to_all_single(out, src, group=pg, async_op=async_op)
            if async_op:
                w.wait()
            agree(comm, torch.equal(out, expect), f"all_to_all_single {what} "
                                                  f"in_place={in_place}")

        ins = [data(dtype, (j + 1,), 100 * me + j) for j in range(n)]     # uneven: list form
        ours = [torch.empty(me + 1, dtype=dtype) for _ in range(n)]
        theirs = [torch.empty(me + 1, dtype=dtype) for _ in range(n)]
        w = dist.all_to_all(ours, ins, group=pg, async_op=async_op)
        if async_op:
            w.wait()
        oracle(gloo, lambda: dist.all_to_all(theirs, ins, group=gloo),
               lambda: [t.copy_(data(dtype, (me + 1,), 100 * r + me))
                        for r, t in enumerate(theirs)])
        agree(comm, all(torch.equal(a, b) for a, b in zip(ours, theirs)), f"all_to_all {what}")


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reduce_scatter(comm, groups, dtype):
    gloo, pg = groups
    n, me = comm.size, comm.rank
    for op in ops_for(dtype):
        for async_op in (False, True):
            what = f"{dtype} {op} async_op={async_op}"

            def x(r, op=op):
                return data(dtype, (n * 4,), 9 * r + 2, op)
            full = oracle(gloo, lambda: (lambda t: (dist.all_reduce(t, op=op), t)[1])(
                x(me)), lambda: reference(gloo, "all_reduce", x, op, dtype))
            mine = full[4 * me:4 * (me + 1)]

            out = torch.empty(4, dtype=dtype)
            w = dist.reduce_scatter(out, list(x(me).chunk(n)), op=op, group=pg,
                                    async_op=async_op)
            if async_op:
                w.wait()
            check_reduction(comm, f"reduce_scatter {what}", out, mine)

            for in_place in (False, True):
                src = x(me)
                out = src[4 * me:4 * (me + 1)] if in_place else torch.empty(4, dtype=dtype)
                w = dist.reduce_scatter_tensor(out, src, op=op, group=pg, async_op=async_op)
                if async_op:
                    w.wait()
                check_reduction(comm, f"reduce_scatter_tensor {what} in_place={in_place}",
                                out, mine)


def test_barrier_and_point_to_point(comm, groups):
    _, pg = groups
    n, me = comm.size, comm.rank
    dist.barrier(group=pg)
    dist.barrier(group=pg, async_op=True).wait()
    for dtype in DTYPES:
        to, fro = (me + 1) % n, (me - 1) % n
        x = data(dtype, (6,), me)
        got = torch.empty(6, dtype=dtype)
        if me % 2 == 0:
            dist.send(x, to, group=pg)
            dist.recv(got, fro, group=pg)
        else:
            dist.recv(got, fro, group=pg)
            dist.send(x, to, group=pg)
        agree(comm, torch.equal(got, data(dtype, (6,), fro)), f"send/recv {dtype}")
        got = torch.empty(6, dtype=dtype)
        works = [dist.irecv(got, fro, group=pg, tag=3), dist.isend(x, to, group=pg, tag=3)]
        for w in works:
            w.wait()
        agree(comm, torch.equal(got, data(dtype, (6,), fro)), f"isend/irecv {dtype}")


def test_recv_from_any_source(comm, groups):
    """``dist.recv(t)`` and ``irecv(t)`` without ``src``: rank 0 receives each other rank's
    tensor and learns who sent it (the returned rank, ``work._source_rank()``)."""
    _, pg = groups
    senders = []
    if comm.rank == 0:
        for i in range(1, comm.size):
            got = torch.empty(4)
            if i % 2:
                sender = dist.recv(got, group=pg)
            else:
                w = dist.irecv(got, group=pg)
                w.wait()
                sender = w._source_rank()
            senders.append((sender, torch.equal(got, torch.full((4,), float(sender)))))
    else:
        dist.send(torch.full((4,), float(comm.rank)), 0, group=pg)
    agree(comm, comm.rank != 0 or (sorted(s for s, _ in senders) == list(range(1, comm.size))
                                  and all(ok for _, ok in senders)), str(senders))


def test_all_gather_coalesced(comm, groups):
    """Tensors of several shapes (one empty) gathered at once, as gloo gathers them."""
    gloo, pg = groups
    n, me = comm.size, comm.rank
    shapes = [(2, 3), (0,), (5,)]
    inputs = [torch.full(s, float(me + 10 * i)) for i, s in enumerate(shapes)]

    def outputs():
        return [[torch.empty(s) for s in shapes] for _ in range(n)]
    ours, theirs = outputs(), outputs()
    dist.all_gather_coalesced(ours, inputs, group=pg)
    dist.all_gather_coalesced(theirs, inputs, group=gloo)
    agree(comm, all(torch.equal(a, b) for xs, ys in zip(ours, theirs) for a, b in zip(xs, ys)))
    w = dist.all_gather_coalesced(ours := outputs(), inputs, group=pg, async_op=True)
    w.wait()
    agree(comm, all(torch.equal(a, b) for xs, ys in zip(ours, theirs) for a, b in zip(xs, ys)))


def test_uneven_all_to_all_single(comm, groups):
    _, pg = groups
    n, me = comm.size, comm.rank
    splits = [[(i + j) % 3 for j in range(n)] for i in range(n)]   # rank i sends splits[i][j]
    rows = sum(splits[me])                                        # rows to rank j (some 0)
    src = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) + 1000 * me
    recv = [splits[i][me] for i in range(n)]
    out = torch.full((sum(recv), 2), -1.0)
    for async_op in (False, True):
        w = dist.all_to_all_single(out, src, output_split_sizes=recv,
                                   input_split_sizes=splits[me], group=pg, async_op=async_op)
        if async_op:
            w.wait()
        expect = []
        for i in range(n):
            at = sum(splits[i][:me])
            expect.append(torch.arange(sum(splits[i]) * 2, dtype=torch.float32)
                          .reshape(-1, 2)[at:at + splits[i][me]] + 1000 * i)
        agree(comm, torch.equal(out, torch.cat(expect)), f"{out} vs {expect}")
    wrong = list(recv)
    wrong[0] += 1 if comm.rank == 0 else 0
    if comm.rank == 0:
        out = torch.empty(sum(wrong), 2)
    with pytest.raises(ValueError, match="split sizes disagree"):
        dist.all_to_all_single(out, src, output_split_sizes=wrong,
                               input_split_sizes=splits[me], group=pg)


def test_new_group_of_a_subset(comm, groups):
    _, pg = groups
    members = list(range(1, comm.size))                 # all but rank 0
    sub = dist.new_group(members, backend="pyar", timeout=timedelta(seconds=SECONDS))
    ok = True
    if comm.rank in members:
        ok = sub.size() == len(members) and sub.rank() == comm.rank - 1
        t = torch.full((4,), float(comm.rank))
        dist.all_reduce(t, group=sub)
        ok = ok and torch.equal(t, torch.full((4,), float(sum(members))))
        out = [torch.empty(1) for _ in members]
        dist.all_gather(out, torch.tensor([float(comm.rank)]), group=sub)
        ok = ok and [float(o) for o in out] == [float(m) for m in members]
    else:
        ok = sub == dist.GroupMember.NON_GROUP_MEMBER
    agree(comm, ok, "new_group of ranks 1..")
    dist.all_reduce(torch.ones(1), group=pg)            # the whole group goes on


# -- errors ---------------------------------------------------------------------------------

MISMATCHED = {      # rank 0 calls with 5 elements, the others with 6
    "all_reduce": lambda n, g, a: dist.all_reduce(torch.ones(n), group=g, async_op=a),
    "broadcast": lambda n, g, a: dist.broadcast(torch.ones(n), 0, group=g, async_op=a),
    "all_gather_into_tensor": lambda n, g, a: dist.all_gather_into_tensor(
        torch.empty(n * g.size()), torch.ones(n), group=g, async_op=a),
    "reduce_scatter_tensor": lambda n, g, a: dist.reduce_scatter_tensor(
        torch.empty(n), torch.ones(n * g.size()), group=g, async_op=a),
}


@pytest.mark.parametrize("async_op", [False, True])
@pytest.mark.parametrize("name", list(MISMATCHED))
def test_mismatched_shapes_are_an_error_on_every_rank(comm, groups, name, async_op):
    """A call of 5 elements on rank 0, 6 elsewhere: a DistBackendError with pyar's message
    (its MismatchError: which call, which ranks) on every rank, well within the timeout;
    the group is unusable after (pyar's rule), so each case has one of its own."""
    group = dist.new_group(backend="pyar", timeout=timedelta(seconds=SECONDS))
    pyar_name = {"all_reduce": "allreduce", "broadcast": "bcast",
                 "all_gather_into_tensor": "allgather",
                 "reduce_scatter_tensor": "reduce_scatter"}[name]
    with pytest.raises(dist.DistBackendError, match=f"pyar: MismatchError.*{pyar_name}"):
        w = MISMATCHED[name](5 if comm.rank == 0 else 6, group, async_op)
        if async_op:
            w.wait()
    agree(comm, True)


def test_unsupported_ops_and_inputs_are_clear_errors(comm, groups):
    _, pg = groups
    with pytest.raises(ValueError, match="BAND"):
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND, group=pg)
    with pytest.raises(ValueError, match="avg of bool"):
        dist.all_reduce(torch.ones(2, dtype=torch.bool), op=dist.ReduceOp.AVG, group=pg)
    with pytest.raises(TypeError, match="avg' needs a floating dtype"):
        dist.all_reduce(torch.ones(2, dtype=torch.int64), op=dist.ReduceOp.AVG, group=pg)
    with pytest.raises(ValueError, match="all_gather_into_tensor"):
        dist.all_gather_into_tensor(torch.empty(3), torch.ones(2), group=pg)
    agree(comm, True)
    dist.all_reduce(torch.ones(1), group=pg)            # nothing was started: it goes on


# -- DDP ------------------------------------------------------------------------------------

def ddp_losses(comm, group, compression, steps=50):
    """DDP on ``group`` (a small MLP, each rank its own batches, SGD) for ``steps`` steps,
    with the fp16 comm hook if ``compression``: pyar's on a pyar group, torch's
    ``fp16_compress_hook`` on gloo's; (this rank's losses, its parameters' bytes)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                torch.nn.Linear(64, 4))
    ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                    bucket_cap_mb=0.01)
    if compression and isinstance(group, pyar.torch.ProcessGroupPyar):
        ddp.register_comm_hook(pyar.torch.HookState(comm=group.comm, compression="fp16"),
                               pyar.torch.comm_hook)
    elif compression:
        ddp.register_comm_hook(group, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(100 * step + comm.rank)
        x = torch.randn(8, 16, generator=g)
        opt.zero_grad()
        loss = (ddp(x) - x[:, :4].sin()).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return np.array(losses), b"".join(p.detach().numpy().tobytes() for p in model.parameters())


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "fp16-hook"])
def test_ddp_on_pyar_trains_what_ddp_on_gloo_does(comm, groups, compression):
    """50 steps: the losses on every rank equal gloo's within float rounding, the parameters
    bitwise identical on every rank; DDP's gradient allreduces went through the pyar group
    (plain) or through the hook only (its set-up collectives aside)."""
    gloo, pg = groups
    before = pg.calls
    ours, params = ddp_losses(comm, pg, compression)
    theirs, _ = ddp_losses(comm, gloo, compression)
    off = float(np.max(np.abs(ours - theirs) / np.abs(theirs)))
    agree(comm, np.allclose(ours, theirs, rtol=1e-4, atol=1e-7), f"losses off by {off:.2e}")
    agree(comm, len(set(comm.allgather(params))) == 1, "parameters differ between ranks")
    agree(comm, (pg.calls - before > 50) != compression, f"{pg.calls - before} calls")


def test_pyar_reproducible_makes_all_reduce_reproducible_and_complete(comm, groups, monkeypatch):
    """PYAR_REPRODUCIBLE=1 (as every rank agreed it): a float all_reduce, async or not, has the
    bits of pyar.allreduce(reproducible=True), and its work is complete when returned."""
    from pyar.runtime import settings
    _, pg = groups
    monkeypatch.setattr(settings, "_agreed", settings.current()._replace(reproducible=True))
    rng = np.random.default_rng(comm.rank)
    x = (rng.standard_normal(1000) * 2.0 ** rng.integers(-20, 20, 1000)).astype(np.float32)
    want = pyar.allreduce(x, reproducible=True)
    for async_op in (False, True):
        t = torch.from_numpy(x.copy())
        work = dist.all_reduce(t, group=pg, async_op=async_op)
        agree(comm, t.numpy().tobytes() == want.tobytes() and (work is None or
                                                              work.is_completed()),
              f"async_op={async_op}")
