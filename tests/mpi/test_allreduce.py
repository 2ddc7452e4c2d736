"""pyar.allreduce against MPI_Allreduce on the same data, at whatever size mpiexec gives."""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from mpi4py import MPI

import pyar
from pyar.core.ops import DTYPES, HALF, Op, is_float
from pyar.collectives import block
from pyar.core.schedule import Chunk, Recv, Send, Step
from pyar.verify import sample

from pyar.runtime.plan import RESIDENT_BYTES

from checks import agree, check_against_mpi, dtype_op_grid, library_may_differ

# the registry's names, and parameterized ones (name:key=value) through the same paths
ALGORITHMS = pyar.algorithms() + ["knomial:k=3", "recexch:k=3", "segmented_ring:segment=100",
                                   "swing_bandwidth:ports=2", "swing_latency:ports=2"]


def ops_for(dtype):
    return [op for op in Op if op is not Op.AVG or is_float(dtype)]


@pytest.mark.sweep
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_every_op_and_dtype(comm, algorithm):
    for dtype, op in dtype_op_grid(comm.size, ops_for):
        for count in sorted({0, 1, comm.size - 1, 1000}):     # (a set: 1 once at 2 ranks)
            x = sample(comm.rank, count, dtype, op, seed=count)
            result = pyar.allreduce(x, op=op, algorithm=algorithm)
            check_against_mpi(comm, result, x, op, f"{algorithm} {op} {dtype} count={count}",
                              identical=not library_may_differ(algorithm, op, dtype),
                              library=algorithm == "mpi")


@pytest.mark.sweep
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_precision_nans_infinities_and_zeros(comm, dtype):
    """NaNs with a payload and sign per rank, infinities of both signs, signed zeros: pyar's
    algorithms give every rank the same bits (the mpi baseline is held to the numbers only)."""
    quiet = 0x7E00 if dtype == np.float16 else 0x7FC0
    for algorithm in ALGORITHMS:
        for op in ("sum", "prod", "max", "min"):
            x = sample(comm.rank, 60, dtype, op, seed=5)
            x.view(np.uint16)[::7] = quiet | (comm.rank + 1) | (0x8000 if comm.rank % 2 else 0)
            x[3::11] = -np.inf if comm.rank % 2 else np.inf
            x[5::13] = -0.0 if comm.rank % 3 else 0.0
            result = pyar.allreduce(x, op=op, algorithm=algorithm)
            check_against_mpi(comm, result, x, op, f"{algorithm} {op} {dtype} specials",
                              identical=algorithm != "mpi")


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_half_types_reduce_in_float32_and_round_once(comm, dtype):
    """float16 and bfloat16 sums run in float32 and are rounded to the half type once, by every
    algorithm and on every path: the result is the exact sum rounded once (integers whose
    float32 sums are exact, whose half-type partial sums are not), and a float16 average
    whose partial sums overflow float16 is finite. With ``reduce_dtype=x.dtype`` pyar's
    schedules fold in the half type, bitwise what the simulator does with it."""
    size, rank, n = comm.size, comm.rank, 40
    top = 256 if dtype == HALF[1] else 2048          # integers the half type holds exactly
    x = np.random.default_rng([rank, 7]).integers(1, top, n).astype(dtype)
    inputs = comm.allgather(x)
    exact = np.sum([a.astype(np.float64) for a in inputs], axis=0).astype(dtype)
    mine = block(n, size, rank)
    topology = pyar.Comm.of(comm).topology      # (the nodes the calls' schedules are built on)
    for algorithm in ALGORITHMS:
        what = f"{algorithm} {dtype}"
        got = [pyar.allreduce(x, algorithm=algorithm)]
        y = x.copy()
        got.append(pyar.allreduce(y, y, algorithm=algorithm).copy())
        got.append(pyar.iallreduce(x, algorithm=algorithm).wait())
        with pyar.allreduce_init(y, np.empty_like(y), algorithm=algorithm) as request:
            for _ in range(2):
                y[...] = x
                request.start()
                got.append(request.wait().copy())
        agree(comm, all(g.dtype == dtype and g.tobytes() == exact.tobytes() for g in got),
              f"{what}: not the exact sum rounded once")
        if algorithm != "mpi":
            folded = pyar.simulate(pyar.schedule(algorithm, size, n, topology=topology), inputs,
                                   reduce_dtype=dtype).outputs[rank]
            got = pyar.allreduce(x, algorithm=algorithm, reduce_dtype=dtype)
            agree(comm, got.tobytes() == folded.tobytes(),
                  f"{what}: reduce_dtype={dtype} is not the simulator's half-type folds")
    scattered = pyar.reduce_scatter(x)
    agree(comm, scattered.tobytes() == exact[mine].tobytes(), f"reduce_scatter {dtype}")
    total = pyar.reduce(x, root=size - 1)
    agree(comm, rank != size - 1 or total.tobytes() == exact.tobytes(), f"reduce {dtype}")
    if dtype == HALF[0] and size > 1:
        big = np.full(n, 60000, dtype)              # sums overflow float16; the average not
        for algorithm in ALGORITHMS:
            got = pyar.allreduce(big, op="avg", algorithm=algorithm)
            agree(comm, np.array_equal(got, big), f"{algorithm}: float16 avg overflowed")


LAYOUTS = ["new", "in_place", "out", "strided_new", "strided_in_place", "strided_out"]


@given(algorithm=st.sampled_from(ALGORITHMS), op=st.sampled_from(list(Op)),
       dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       shape=st.one_of(st.tuples(st.integers(0, 3000)),
                       st.lists(st.integers(0, 9), min_size=2, max_size=3).map(tuple)),
       seed=st.integers(0, 2**16))
def test_property_against_mpi_allreduce(comm, algorithm, op, dtype, layout, shape, seed):
    if op is Op.AVG and not is_float(dtype):
        op = Op.SUM
    count = int(np.prod(shape))
    data = sample(comm.rank, count, dtype, op, seed).reshape(shape)
    if layout.startswith("strided"):
        wide = np.zeros(shape[:-1] + (2 * shape[-1],), dtype)
        wide[..., ::2] = data
        x = wide[..., ::2]
        assert not x.flags.c_contiguous or x.size <= 1
    else:
        x = data.copy()
    original = x.copy()
    what = f"{algorithm} {op} {dtype} {layout} shape={shape}"
    if layout.endswith("in_place"):
        result = pyar.allreduce(x, x, op=op, algorithm=algorithm)
        agree(comm, result is x, f"{what}: in place must return x")
    elif layout.endswith("out"):
        out = np.full_like(x, 7) if layout == "out" else np.full_like(wide, 7)[..., 1::2]
        result = pyar.allreduce(x, out, op=op, algorithm=algorithm)
        agree(comm, result is out and np.array_equal(x, original),
              f"{what}: must write out and leave x alone")
    else:
        result = pyar.allreduce(x, op=op, algorithm=algorithm)
        agree(comm, result is not x and np.array_equal(x, original),
              f"{what}: must return a new array and leave x alone")
    agree(comm, result.shape == shape and result.dtype == dtype, f"{what}: shape/dtype")
    check_against_mpi(comm, result, original, op, what,
                      identical=not library_may_differ(algorithm, op, dtype),
                      library=algorithm == "mpi")


def test_repeated_calls_interleaved_with_user_traffic(comm):
    """pyar's messages never match the user's, even a wildcard receive posted around them."""
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    marker = np.full(3, 1000 + comm.rank, np.int64)
    got = np.zeros(3, np.int64)
    wildcard = comm.Irecv(got, MPI.ANY_SOURCE, MPI.ANY_TAG)
    failures = []
    for i in range(20):
        algorithm = ALGORITHMS[i % len(ALGORITHMS)]
        x = sample(comm.rank, 257 + i, np.float64, "sum", seed=i)
        try:
            check_against_mpi(comm, pyar.allreduce(x, algorithm=algorithm), x, "sum", algorithm)
        except AssertionError as e:
            failures.append(str(e))
    comm.Send(marker, right, tag=0)
    wildcard.Wait()
    agree(comm, not failures, "; ".join(failures[:2]))
    agree(comm, got.tolist() == [1000 + left] * 3, f"user message corrupted: {got}")


def test_small_messages_repeat_on_resident_and_bound_buffers(comm):
    """A repeated small allreduce runs on persistent requests: on the plan's own buffer, or on
    the caller's ``out`` once it comes twice in a row (pyar.runtime.programs.Resident). Every
    ``out`` form, a switch of ``out``, avg, and large calls (other tags) in between: each
    result is MPI_Allreduce's."""
    from pyar.runtime import persistent

    shape, failures = (3, 13), []
    same, other = np.empty(shape, np.float32), np.empty(shape, np.float32)
    in_place = np.empty(shape, np.float32)
    strided = np.empty((3, 26), np.float32)[:, ::2]
    big = RESIDENT_BYTES // 4 + 5
    forms = ["same", "same", "same", "in place", "in place", "in place", "new", "alternate",
             "alternate", "strided", "strided", "big", "same", "avg", "avg", "avg"]
    for i, form in enumerate(forms):
        op = "avg" if form == "avg" else "sum"
        x = sample(comm.rank, shape[0] * shape[1], np.float32, op, seed=i).reshape(shape)
        if form == "big":
            x = sample(comm.rank, big, np.float32, op, seed=i)
            out = None
        elif form == "in place":
            in_place[...] = x
            out = in_place
        else:
            out = {"same": same, "avg": same, "new": None, "strided": strided,
                   "alternate": other if i % 2 else same}[form]
        original = x.copy()
        try:
            result = pyar.allreduce(x if out is not in_place else in_place, out, op=op,
                                    algorithm="recursive_doubling")
            if out is not None and result is not out:
                raise AssertionError(f"{form}: the result is not out")
            check_against_mpi(comm, result, original, op, f"call {i}: {form}")
        except AssertionError as e:
            failures.append(str(e))
    bound = [r.out is same and r.engine.resident is not None
             and np.shares_memory(r.engine.resident.data, same)
             for r in persistent._cache.values() if r.x is not None and r.x.shape == shape]
    agree(comm, not failures, "; ".join(failures[:2]))
    agree(comm, any(bound), "no repeat ran on the caller's out bound to persistent requests")


def test_a_repeated_out_is_bound_and_x_is_read_afresh_each_call(comm):
    """Out of place, the same out twice in a row binds the plan's Resident to it (the call
    runs in out's memory, x copied in). x changed in place between calls, another x with
    the same out, then the first x again: each result is MPI_Allreduce's, in out, and x is
    left alone."""
    from pyar.runtime import persistent

    x, y, out = (np.empty((4, 10), np.int32) for _ in range(3))
    failures = []
    for i, (src, form) in enumerate([(x, "first"), (x, "binds"), (x, "repeats"),
                                     (y, "another x"), (x, "the first again"), (x, "repeats")]):
        src[...] = sample(comm.rank, src.size, np.int32, "sum", seed=i).reshape(src.shape)
        original = src.copy()
        try:
            result = pyar.allreduce(src, out, algorithm="ring")
            if result is not out:
                raise AssertionError(f"call {i} ({form}): the result is not out")
            if not np.array_equal(src, original):
                raise AssertionError(f"call {i} ({form}): x was modified")
            check_against_mpi(comm, result, original, "sum", f"call {i} ({form})")
        except AssertionError as e:
            failures.append(str(e))
    agree(comm, not failures, "; ".join(failures[:2]))
    bound = [r.engine.resident for r in persistent._cache.values() if r.out is out]
    agree(comm, bound and bound[0] is not None and np.shares_memory(bound[0].data, out),
          "the plan's Resident was not bound to out")


@pytest.mark.sweep
@pytest.mark.parametrize("algorithm", [a for a in ALGORITHMS if a != "mpi"])
def test_large_out_of_place_reads_x_itself(comm, algorithm):
    """Above RESIDENT_BYTES an out-of-place allreduce runs the plan's out-of-place variant:
    sends of x's elements read x, folds into them receive in place and fold x's in, x is
    copied only where needed. Every out form, x left alone, against MPI_Allreduce."""
    count = RESIDENT_BYTES // 4 + 3 * comm.size + 1
    failures = []
    for i, (dtype, op) in enumerate([(np.float32, "sum"), (np.int32, "prod"),
                                     (np.float64, "max"), (HALF[1], "min"),
                                     (np.float64, "avg")]):
        x = sample(comm.rank, count, dtype, op, seed=i)
        original = x.copy()
        outs = {"new": None, "out": np.empty_like(x), "strided": np.empty(2 * count, dtype)[::2],
                "overlapping": x}           # x itself: in place, the plan's plain form
        for form, out in outs.items():
            what = f"{algorithm} {np.dtype(dtype)} {op} {form}"
            x[...] = original
            try:
                for _ in range(2):          # the first call checks, the second repeats
                    x[...] = original
                    result = pyar.allreduce(x, out, op=op, algorithm=algorithm)
                    if out is not None and result is not out:
                        raise AssertionError(f"{what}: the result is not out")
                    if out is not x and not np.array_equal(x, original):
                        raise AssertionError(f"{what}: x was modified")
                    check_against_mpi(comm, result, original, op, what)
            except AssertionError as e:
                failures.append(str(e))
    frozen = sample(comm.rank, count, np.float32, "sum", seed=9)
    frozen.flags.writeable = False          # only read, as x
    try:
        for _ in range(2):
            check_against_mpi(comm, pyar.allreduce(frozen, algorithm=algorithm), frozen, "sum",
                              f"{algorithm} read-only x")
    except AssertionError as e:
        failures.append(str(e))
    agree(comm, not failures, "; ".join(failures[:2]))


def test_large_calls_on_one_node_stream_through_mailboxes(comm):
    """Above RESIDENT_BYTES, with every rank on one node and room in the mailboxes, a ring
    plan runs as a Stream (pyar.runtime.programs.Stream: its messages in pieces through shared
    memory), in place and in its out-of-place variant alike. Ranks that mix in place and out
    of place, and the lean path with the stepped one (a timeout), meet: each result is
    MPI_Allreduce's, x left alone. (On a communicator of its own: the earlier tests' plans
    may have taken all of COMM_WORLD's shared memory, as they do at 8 ranks.)"""
    from pyar.runtime import shm

    count = RESIDENT_BYTES // 4 + 7 * comm.size + 3
    sub = comm.Dup()
    failures = []
    for i in range(6):
        x = sample(comm.rank, count, np.float32, "sum", seed=i)
        original = x.copy()
        in_place, timeout = (comm.rank + i) % 2 == 0, 30 if (comm.rank + i) % 3 == 0 else None
        try:
            result = pyar.allreduce(x, x if in_place else None, algorithm="ring", comm=sub,
                                    timeout=timeout)
            if not in_place and not np.array_equal(x, original):
                raise AssertionError(f"call {i}: x was modified")
            check_against_mpi(comm, result, original, "sum",
                              f"call {i}: {'in place' if in_place else 'out of place'}, "
                              f"timeout {timeout}")
        except AssertionError as e:
            failures.append(str(e))
    agree(comm, not failures, "; ".join(failures[:2]))
    plan = next(p for p in pyar.Comm.of(sub).plans.values() if p.count == count)
    streams = [s for v in (plan, *plan._variants.values()) for s in v._streams.values()]
    pool = shm.pool_of(pyar.Comm.of(sub).mpi)
    one_node = pool is not None and len(pool.local) == comm.size and \
        len(pool.segments[0]) >= 1 << 20
    sub.Free()
    agree(comm, not one_node or len(streams) == 2 and all(streams),
          f"on one node with mailboxes: streams {streams}")


def test_large_calls_read_from_the_senders_memory_give_the_mailboxes_bits(comm, monkeypatch):
    """Where every rank of the node may read the others' memory (shm.Pool.attach: the probe,
    unless PYAR_CMA=0), a Stream's messages are offered and read straight from the sender's
    buffer (OFFER, GET, GET_FOLD rows): from ATTACH_BYTES, or at any size with PYAR_CMA=1;
    else they stream through mailboxes in pieces. Both give the same bits, call after call,
    in place and out of place, for allreduce (ring, rabenseifner), reduce_scatter and
    allgather, and x is left alone; PYAR_CMA=0 takes the mailboxes."""
    from pyar.kernels import mailbox
    from pyar.runtime import settings, shm

    monkeypatch.setattr(settings, "_agreed", settings._agreed)  # (the Comms below agree)
    count = RESIDENT_BYTES // 4 * 3 + 5 * comm.size + 1
    results, failures, attached = {}, [], {}
    for cma in ("0", "1"):
        monkeypatch.setenv("PYAR_CMA", cma)
        sub = comm.Dup()
        got = results[cma] = []
        for i in range(3):
            x = sample(comm.rank, count, np.float32, "sum", seed=i)
            original = x.copy()
            got.append(pyar.allreduce(x, algorithm="ring", comm=sub))
            got.append(pyar.allreduce(x, algorithm="rabenseifner", comm=sub))
            got.append(pyar.reduce_scatter(x, comm=sub))
            got.append(pyar.allgather(x, comm=sub).ravel())
            if not np.array_equal(x, original):
                failures.append(f"PYAR_CMA={cma}, call {i}: x was modified")
            y = x.copy()
            got.append(pyar.allreduce(y, y, algorithm="ring", comm=sub).copy())
        check_against_mpi(comm, got[0], sample(comm.rank, count, np.float32, "sum", seed=0),
                          "sum", f"PYAR_CMA={cma}: ring")
        pool = shm.pool_of(pyar.Comm.of(sub).mpi)
        streams = [s for p in pyar.Comm.of(sub).plans.values()
                   for v in (p, *p._variants.values()) for s in v._streams.values() if s]
        attach = pool is not None and pool.attach
        attached[cma] = attach
        offers = [bool((s.program[:, 0] == mailbox.OFFER).any()) for s in streams]
        messages = [bool(s.program[:, 1].any()) for s in streams]    # (a stamp: not local)
        if cma == "0" and attach:
            failures.append("PYAR_CMA=0, yet the pool reads from the senders' memory")
        if offers != [attach and m for m in messages]:
            failures.append(f"PYAR_CMA={cma}: attach {attach}, streams offering {offers}")
        sub.Free()
    for i, (a, b) in enumerate(zip(results["0"], results["1"])):
        if not np.array_equal(a, b):
            failures.append(f"result {i} differs between the mailboxes and the senders' memory")
    agree(comm, not failures, "; ".join(failures[:3]) + f" (attached: {attached})")


def test_freeing_a_communicator_frees_its_persistent_requests_and_mailboxes(comm):
    from pyar.runtime import persistent, shm

    sub = comm.Dup()
    x = np.ones(6)
    for _ in range(3):
        pyar.allreduce(x, x, comm=sub)
    plans = list(pyar.Comm.of(sub).plans.values())
    residents = [r for p in plans for r in [*p._residents.values(), *p._bound]]
    pool = shm.pool_of(pyar.Comm.of(sub).mpi)       # made by the first call: None if disabled
    request = next(r for r in persistent._cache.values() if r.c is pyar.Comm.of(sub))
    sub.Free()          # the Comm goes with it, and frees what its plans hold
    error = outcome(request.start)
    agree(comm, len(residents) == 2 and all(r.steps is None for r in residents)
          and (pool is None or pool.node == MPI.COMM_NULL and pool.segments == [])
          and isinstance(error, pyar.PyarError) and "communicator was freed" in str(error),
          f"{len(residents)} residents, freed: {[r.steps is None for r in residents]}, "
          f"pool {pool and pool.node}, running one afterwards: {error!r}")


@pytest.mark.parametrize("count, algorithm, steps", [(4, "recursive_doubling", 1),
                                                     (RESIDENT_BYTES // 8 + 2, "ring", 2)],
                         ids=["resident", "stream"])
def test_a_rank_left_waiting_on_a_mailbox_times_out(comm, count, algorithm, steps):
    """Ranks 0 and 1 set up their mailboxes with a first call (a Resident's, or a large
    plan's Stream); then rank 0 calls alone with a timeout and gets pyar.TimeoutError naming
    the call, the step and the peer instead of waiting for ever, and from then on an error
    from that communicator (out of step)."""
    pair = comm.Split(0 if comm.rank < 2 else MPI.UNDEFINED, comm.rank)
    ok, what = True, ""
    if pair != MPI.COMM_NULL:
        x = np.ones(count)
        pyar.allreduce(x, x, algorithm=algorithm, comm=pair)
        plan = next(iter(pyar.Comm.of(pair).plans.values()))
        boxes = any(channels and channels.out for channels in plan._channels.values())
        if boxes and pair.rank == 0:        # (none with PYAR_SHM_BYTES=0)
            again = [outcome(lambda: pyar.allreduce(x, x, algorithm=algorithm, comm=pair,
                                                    timeout=0.5)) for _ in range(2)]
            ok = isinstance(again[0], pyar.TimeoutError) and \
                "allreduce #2 on rank 0" in str(again[0]) and \
                f"step 0 of {steps} waited for rank 1" in str(again[0]) and \
                isinstance(again[1], pyar.PyarError) and "unusable" in str(again[1])
            what = repr(again)
        pair.Free()
    agree(comm, ok, f"got {what}")


def test_sub_communicators_and_pyar_comm(comm):
    sub = comm.Split(comm.rank % 2, comm.rank)
    failure = ""
    try:
        for c in (sub, pyar.Comm(sub)):
            x = sample(sub.rank, 100, np.int32, "sum", seed=sub.size)
            result = pyar.allreduce(x, algorithm="ring", comm=c)
            check_against_mpi(sub, result, x, "sum", f"sub-communicator of {sub.size}")
        if pyar.Comm.of(sub) is not pyar.Comm.of(sub):
            failure = "one Comm per communicator expected"
    except AssertionError as e:        # raised on every rank of sub, but not of comm
        failure = str(e)
    finally:
        sub.Free()
    agree(comm, not failure, failure)


@pyar.register_algorithm("relay_through_rank_1")
def relay_through_rank_1(rank, size, count, topology=None):
    """A user's algorithm: ranks >= 2 send via rank 1's scratch to rank 0, which broadcasts."""
    everything = Chunk("data", 0, count)
    if size == 1 or count == 0:
        return []
    if size == 2:
        gather = {0: [Recv(1, everything, True)], 1: [Send(0, everything)]}
        return [Step(gather[rank]), Step([Recv(0, everything)] if rank else [Send(1, everything)])]
    slots = [Chunk("scratch", i * count, (i + 1) * count) for i in range(size - 2)]
    if rank == 0:
        return [Step([Recv(1, everything, True) for _ in range(size - 1)]),
                Step([Send(peer, everything) for peer in range(1, size)])]
    if rank == 1:
        return [Step([Recv(peer, slot) for peer, slot in zip(range(2, size), slots)]),
                Step([Send(0, everything)] + [Send(0, slot) for slot in slots]),
                Step([Recv(0, everything)])]
    return [Step([Send(1, everything)]), Step([Recv(0, everything)])]


def test_custom_registered_algorithm(comm):
    for count in (1, 33, 5000):
        x = sample(comm.rank, count, np.float32, "sum", seed=count)
        result = pyar.allreduce(x, algorithm="relay_through_rank_1")
        check_against_mpi(comm, result, x, "sum", f"relay count={count}")
        sim = pyar.simulate(pyar.schedule("relay_through_rank_1", comm.size, count),
                            [sample(r, count, np.float32, "sum", seed=count)
                             for r in range(comm.size)])
        agree(comm, np.array_equal(sim.outputs[comm.rank], result),
              "the simulator and MPI disagree")


@pytest.mark.parametrize("name", ["swing_bandwidth", "swing_latency"])
def test_swing_on_a_torus_of_the_communicators_ranks(comm, name):
    """Swing along a 2-D torus's dimensions, on one and on every port, where the rank count
    makes one (4: 2x2, 8: 4x2, 16: 4x4, ...): MPI's integer sum, and float32 sums with the
    same bits on every rank."""
    if comm.size < 4 or comm.size & (comm.size - 1):
        pytest.skip("a 2-D torus of powers of two needs a power of two >= 4 ranks")
    side = 1 << (comm.size.bit_length() - 1) // 2
    for algorithm in (f"{name}:dims={comm.size // side}x{side}",
                      f"{name}:dims={comm.size // side}x{side},ports=4"):
        for count in (1, 37, 5000):
            x = sample(comm.rank, count, np.int64, "sum", seed=count)
            result = pyar.allreduce(x, algorithm=algorithm)
            check_against_mpi(comm, result, x, "sum", f"{algorithm} count={count}")
            y = sample(comm.rank, count, np.float32, "sum", seed=count)
            check_against_mpi(comm, pyar.allreduce(y, algorithm=algorithm), y, "sum",
                              f"{algorithm} float32 count={count}")


def test_mpi_ops_and_op_enum_are_accepted(comm):
    x = sample(comm.rank, 10, np.int16, "max")
    for op in (MPI.MAX, pyar.Op.MAX, "MAX"):
        check_against_mpi(comm, pyar.allreduce(x, op=op), x, "max", f"op={op}")


@pyar.register_algorithm("broken_on_last_rank")
def broken_on_last_rank(rank, size, count, topology=None):
    if rank == size - 1:
        raise RuntimeError("this builder fails on the last rank")
    return pyar.schedule("ring", size, count).steps(rank)


@pyar.register_algorithm("short_message")
def short_message(rank, size, count, topology=None):
    """Rank 0 sends one element less than rank 1 expects."""
    if rank == 0:
        return [Step([Send(1, Chunk("data", 0, count - 1))])]
    return [Step([Recv(0, Chunk("data", 0, count), reduce=True)])] if rank == 1 else []


def outcome(call):
    try:
        call()
    except Exception as e:
        return e
    return None


def test_a_builder_failing_on_one_rank_fails_every_rank(comm):
    if comm.size == 1:
        pytest.skip("needs another rank")
    error = outcome(lambda: pyar.allreduce(np.ones(7), algorithm="broken_on_last_rank"))
    last = comm.rank == comm.size - 1
    agree(comm, isinstance(error, RuntimeError) if last else
          isinstance(error, pyar.ScheduleError) and "another rank failed" in str(error),
          f"got {error!r}")


def test_ranks_disagreeing_on_the_count_all_get_a_mismatch_error(comm):
    if comm.size == 1:
        pytest.skip("needs another rank")
    c = pyar.Comm(comm)         # (no rank has a plan for these counts: caught before any message)
    error = outcome(lambda: pyar.allreduce(np.ones(100 + comm.rank), algorithm="ring", comm=c))
    agree(comm, isinstance(error, pyar.MismatchError), f"got {error!r}")
    c.free()


def test_ranks_disagreeing_on_the_reduce_dtype_all_get_a_mismatch_error(comm):
    """float16 in float32 on rank 0, in float16 elsewhere: twice the bytes on one rank's
    messages; every rank gets a MismatchError naming the dtypes, never a wrong sum."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    c = pyar.Comm(comm)
    asked = np.float32 if comm.rank == 0 else np.float16
    error = outcome(lambda: pyar.allreduce(np.ones(50, np.float16), algorithm="ring", comm=c,
                                           reduce_dtype=asked))
    agree(comm, isinstance(error, pyar.MismatchError), f"got {error!r}")
    mine = "dtype float16 in float32" if comm.rank == 0 else "dtype float16,"
    agree(comm, mine in str(error), f"its dtype not named: {error}")
    c.free()


def test_a_short_message_is_an_error_not_stale_data(comm):
    """The receiver raises; its communicator is unusable from then on (its ranks may be out
    of step), with an error that says which call failed and how; a rank still in the call
    hears of it (its error names rank 1), the others completed."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    mine = pyar.Comm(comm)
    error = outcome(lambda: pyar.allreduce(np.ones(4), algorithm="short_message", comm=mine))
    expected = "received 24 bytes from peer 0, expected 32"
    later = outcome(lambda: pyar.allreduce(np.ones(4), algorithm="ring", comm=mine)) \
        if comm.rank == 1 else None
    agree(comm, (isinstance(error, pyar.ScheduleError) and expected in str(error)
                 and isinstance(later, pyar.PyarError) and "unusable" in str(later)
                 and "allreduce #1 on rank 1 (short_message" in str(later))
          if comm.rank == 1 else                 # the others complete, or hear of it
          error is None or getattr(error, "failed_rank", None) == 1,
          f"got {error!r}, then {later!r}")
    mine.free()
