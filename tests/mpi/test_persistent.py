"""Persistent collectives (pyar.allreduce_init and its siblings): every collective and
algorithm started many times, interleaved with blocking and nonblocking calls and the user's
own point-to-point traffic, each result bitwise the blocking call's; mismatches at init and
at start, timeouts, the request's states, threads."""

import sys
import threading

import numpy as np
import pytest
from mpi4py import MPI

import pyar
from pyar.algorithms import algorithm
from pyar.collectives import collective as record_of, records
from pyar.core.ops import Op
from pyar.runtime import recorder
from pyar.verify import sample

from checks import agree, call, inputs, same

CASES = [(r.name, a) for r in records() for a in pyar.algorithms(r.name)
         if a == "mpi" or algorithm(a, r.name).auto]     # the built-ins, not the tests' own
WAIT = 60


def init(record, x, out, name, root):
    """The persistent request of ``record`` on ``x`` (and ``out``, where it takes one)."""
    make = getattr(pyar, f"{record.name}_init")
    if record.name == "barrier":
        return make(algorithm=name, timeout=WAIT)
    kwargs = {"algorithm": name, "timeout": WAIT}
    if record.rooted:
        kwargs["root"] = root
    if not record.out_of_place:         # bcast: in place by definition
        return make(x, **kwargs)
    return make(x, out, **kwargs)


@pytest.mark.sweep
@pytest.mark.parametrize("collective,name", CASES)
def test_many_starts_interleaved_with_other_calls_equal_the_blocking_calls(comm, collective,
                                                                          name):
    """Three requests (a small one, one above RESIDENT_BYTES, one in place where the
    collective has it), started four times over new contents of x, with a blocking call, a nonblocking one
    and user traffic between the starts, waited for in a per-rank order: each result is
    bitwise the blocking call's on the same input."""
    record = record_of(collective)
    root = comm.size - 1
    xs = [inputs(record, comm, count, 10 * i) for i, count in enumerate([3, 70000, 7])]
    outs = [None, np.empty(record.result_shape(xs[1].shape, comm.size, comm.rank))
            if record.out_of_place and record.name != "barrier" else None,
            xs[2] if record.in_place else None]
    requests = [init(record, x, out, name, root) for x, out in zip(xs, outs)]
    user = np.zeros(1, np.int64)
    right, left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    wrong = []
    for start in range(4):
        for i, x in enumerate(xs):
            x[...] = sample(comm.rank, x.size, np.float64, Op.SUM,
                            100 * start + i).reshape(x.shape)
        pristine = [x.copy() for x in xs]
        expected = [call(record, x.copy(), name, False, root) for x in pristine]
        pyar.start_all(requests)
        pending = pyar.iallreduce(np.full(5, comm.rank, np.int64))      # in flight meanwhile
        if start % 2:
            call(record, pristine[0].copy(), name, False, root)         # a blocking call
        comm.Sendrecv(np.array([start], np.int64), right, 3, user, left, 3)     # user traffic
        got = {}
        for i in np.random.default_rng(comm.rank + start).permutation(len(requests)):
            result = requests[i].wait()
            got[i] = None if result is None else np.array(result, copy=True)
        if not np.array_equal(pending.wait(timeout=WAIT),
                              np.full(5, sum(range(comm.size)), np.int64)):
            wrong.append(f"start {start}: the nonblocking call in between")
        wrong += [f"start {start}: request {i}" for i in range(len(xs))
                  if not same(got[i], None if expected[i] is None else np.asarray(expected[i]))]
        if record.name != "bcast":
            wrong += [f"start {start}: x {i} written" for i in range(2)
                      if not np.array_equal(xs[i], pristine[i])]
    for request in requests:
        request.free()
    agree(comm, not wrong, f"{collective} {name}: {wrong[:4]}")


def test_arguments_that_differ_at_init_are_a_mismatch_on_every_rank(comm):
    """A rank whose request has another count (or op) raises MismatchError at init, as every
    rank does, before any message: the communicator stays usable."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    c = pyar.Comm(comm)
    odd = comm.size - 1
    errors = []
    for x, op in [(np.ones(5 if comm.rank == odd else 4), "sum"),
                  (np.ones(4), "max" if comm.rank == odd else "sum")]:
        try:
            pyar.allreduce_init(x, x, op=op, comm=c, timeout=WAIT)
            errors.append(None)
        except pyar.MismatchError as e:
            errors.append(e)
    agree(comm, all(isinstance(e, pyar.MismatchError) for e in errors), repr(errors))
    with pyar.allreduce_init(np.ones(4), comm=c, timeout=WAIT) as request:
        request.start()
        agree(comm, np.array_equal(request.wait(), np.full(4, comm.size)))
    c.free()


def test_requests_started_in_another_order_are_a_mismatch(comm):
    """Rank 0 starts A then B, the others B then A: on every rank an error that is the
    mismatch (a MismatchError, or, where the first request failed in flight before the
    second started, the communicator's unusability naming it), not a hang, not each other's
    data, not the timeout (the request still in flight on a rank whose other one failed
    fails with it); and an error from every later call on that communicator."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    c = pyar.Comm(comm)
    a, b = pyar.allreduce_init(np.ones(4), comm=c, timeout=WAIT), \
        pyar.allreduce_init(np.ones(8), comm=c, timeout=WAIT)
    first, second = (a, b) if comm.rank == 0 else (b, a)
    error = None
    try:
        first.start()
        second.start()
        first.wait()
        second.wait()
    except pyar.PyarError as e:
        error = e
    later = None
    try:
        pyar.allreduce(np.ones(3), comm=c, timeout=WAIT)
    except pyar.PyarError as e:
        later = e
    mismatch = isinstance(error, pyar.PyarError) and not isinstance(error, pyar.TimeoutError) \
        and "MismatchError" in f"{type(error).__name__}: {error}"
    agree(comm, mismatch and isinstance(later, pyar.PyarError),
          f"{error!r}, then {later!r}")     # (later: unusable, or the peer's failure told)


def test_a_start_the_others_make_late_times_out_and_a_wait_may_time_out_alone(comm):
    """Rank 0 waits 0.2 s for a start the others make 0.6 s late: TimeoutError from the wait,
    the request still active, then complete when waited for again. Later rank 0 starts
    alone with the request's own timeout 0.3 s: TimeoutError, and the communicator is
    unusable."""
    import time

    if comm.size == 1:
        pytest.skip("needs another rank")
    c = pyar.Comm(comm)
    x = np.arange(6, dtype=np.float64) + comm.rank
    with pyar.allreduce_init(x, algorithm="ring", comm=c) as request:
        if comm.rank != 0:
            time.sleep(0.6)
        request.start()
        first = None
        if comm.rank == 0:
            try:
                request.wait(timeout=0.2)
            except pyar.TimeoutError as e:
                first = e
        active = request.active
        result = request.wait(timeout=WAIT)
    want = np.arange(6, dtype=np.float64) * comm.size + sum(range(comm.size))
    agree(comm, np.array_equal(result, want) and (comm.rank != 0 or (
        isinstance(first, pyar.TimeoutError) and active)), f"first {first!r}")
    comm.Barrier()
    pair = comm.Split(0 if comm.rank < 2 else 1, comm.rank)
    ok = True
    if comm.rank < 2:
        alone = pyar.allreduce_init(x, comm=pair, timeout=0.3)
        if comm.rank == 0:
            alone.start()
            try:
                alone.wait()
                ok = False
            except pyar.TimeoutError as e:
                ok = "waited for rank 1" in str(e) or "gave up" in str(e)
    comm.Barrier()
    agree(comm, ok, "rank 0's lone start did not time out")


def test_a_native_start_numbers_and_records_its_call_and_a_hook_takes_it_off(comm):
    """A small request whose plan is one native program (ranks of one node, mailboxes) starts
    natively where nothing is in flight: each start is one call number on the communicator, one row of the flight
    recorder naming the request's signature and the line that made it, complete at once
    and equal to the blocking call; with a listener on the progress hook the starts take
    the Python path and give the same results. Where the plan is not one native program
    (ranks on several nodes, no mailboxes), the request is not armed."""
    from pyar.runtime import progress
    from pyar.runtime.programs import Resident

    c = pyar.Comm(comm)
    x = np.arange(5, dtype=np.float32) + comm.rank
    want = pyar.allreduce(x, comm=c)
    request = pyar.allreduce_init(x, np.empty_like(x), comm=c)
    line = sys._getframe().f_lineno - 1         # the line that made the request
    native = isinstance(request.engine.program, Resident)
    agree(comm, (request.at != 0) == native, f"armed {request.at != 0}, native {native}")
    before = c.seq
    # (a run an earlier test left in flight on its broken communicator, as a mismatch of
    # requests started in another order does, keeps this rank's starts on the Python path)
    quiet = progress.FLIGHT[0] == 0
    results = []
    for _ in range(5):
        request.start()
        results.append(same(request.wait(), want))
    agree(comm, all(results) and c.seq == before + 5, f"{results}, {c.seq - before} numbered")
    rows = c.recorder.ring[1:][c.recorder.ring[1:, 0] > before]
    numbers = list(range(before + 1, before + 6))
    agree(comm, sorted(rows[:, 0].tolist()) == numbers if native and quiet else
          set(rows[:, 0].tolist()) <= set(numbers) if native else len(rows) == 0,
          f"native rows {rows.tolist()} (armed {native}, nothing in flight {quiet})")
    # every call has its record, complete: a native one names the line that made the request
    # (a start whose peer was late went on in Python: its own record)
    records = {r[0]: r for r in c.recorder.calls if r[0] > before}
    ended = {seq for seq, _, _, end in rows.tolist() if end}
    agree(comm, sorted(records) == numbers and all(
        r[1][0] == "allreduce" and r[5] is not None for r in records.values()) and all(
        records[s][2].co_filename == __file__ and
        recorder.line_of(records[s][2], records[s][3]) == line for s in ended),
        f"records {records}, natively complete {ended}, line {line}")

    def listener(event, run, step):
        seen.append(event)

    seen: list = []
    progress.listen(listener)
    try:
        for _ in range(3):
            request.start()
            results.append(same(request.wait(), want))
    finally:
        progress.unlisten(listener)
    agree(comm, all(results) and "done" in seen and len(c.recorder.ring[1:][
        c.recorder.ring[1:, 0] > before]) == len(rows), f"hook events {seen[:4]}")
    request.free()


def test_a_request_s_states_are_checked(comm):
    """Starting an active request, waiting for one not started, using a freed one: clear
    errors; a request frees itself at the end of a with block, waiting for an active start
    first; free is idempotent."""
    x = np.ones(3)
    request = pyar.allreduce_init(x, comm=comm)
    errors = []
    for action in (request.wait, request.test):
        try:
            action()
        except pyar.PyarError as e:
            errors.append("not started" in str(e))
    request.start()
    try:
        request.start()
    except pyar.PyarError as e:
        errors.append("active" in str(e))
    result = request.wait()
    request.start()
    request.free()              # waits for the active start first
    request.free()
    for action in (request.start, request.wait):
        try:
            action()
        except pyar.PyarError as e:
            errors.append("freed" in str(e))
    with pyar.allreduce_init(x, x, comm=comm) as inside:
        inside.start()
    agree(comm, errors == [True] * 5 and np.array_equal(result, np.full(3, comm.size))
          and not inside.active and np.array_equal(x, np.full(3, comm.size)), repr(errors))


def test_bad_arguments_raise_at_init(comm):
    with pytest.raises(TypeError, match="numpy array"):
        pyar.allreduce_init([1, 2, 3], comm=comm)
    with pytest.raises(ValueError, match="out must have"):
        pyar.allreduce_init(np.ones(3), np.ones(4), comm=comm)
    with pytest.raises(ValueError, match="timeout must be"):
        pyar.allreduce_init(np.ones(3), comm=comm, timeout=-1)
    with pytest.raises(ValueError, match="root must be a rank"):
        pyar.reduce_init(np.ones(3), root=comm.size, comm=comm)


def test_a_request_waited_for_in_another_thread(comm):
    """A request started in the main thread is waited for in another; a blocking call on its
    communicator from a third thread while the start is being made is no concern of the
    request (the start holds the call token only while it starts)."""
    x = np.arange(4, dtype=np.float64) + comm.rank
    got = {}
    with pyar.allreduce_init(x, comm=comm, timeout=WAIT) as request:
        for round in range(3):
            request.start()
            worker = threading.Thread(target=lambda: got.setdefault(round, request.wait()
                                                                    .copy()))
            worker.start()
            worker.join(WAIT)
    want = np.arange(4, dtype=np.float64) * comm.size + sum(range(comm.size))
    agree(comm, all(np.array_equal(got.get(r), want) for r in range(3)), repr(got))


def test_torch_tensors_run_persistent(comm):
    """A persistent request on torch CPU tensors: in place, the tensor itself comes back."""
    torch = pytest.importorskip("torch")
    t = torch.full((5,), float(comm.rank + 1))
    with pyar.allreduce_init(t, t, comm=comm) as request:
        for step in range(3):
            t.fill_(float(comm.rank + step))
            request.start()
            result = request.wait()
            agree(comm, result is t and torch.equal(t, torch.full(
                (5,), float(sum(range(comm.size)) + step * comm.size))), repr(t))


def test_a_freed_request_gives_its_shared_memory_back(comm):
    """A request's own mailboxes (a Resident's, small; a Stream's, large) are carved from the
    node's segment at init and go back to it when it is freed: requests made and freed in
    turn, as a benchmark makes them size after size, never run out of it. With many alive
    at once, they do, and the later ones run on MPI's point-to-point."""
    from pyar.runtime import shm

    c = pyar.Comm(comm)
    pool = shm.pool_of(c.mpi)
    if pool is None or comm.size == 1:
        pytest.skip("no shared-memory segment (PYAR_SHM_BYTES=0, or one rank)")
    before = pool.used
    for count in (4, 1 << 17, 4, 1 << 17):
        x = np.ones(count, np.float32)
        with pyar.allreduce_init(x, comm=c, timeout=WAIT) as request:
            for _ in range(3):
                request.start()
                assert (request.wait() == comm.size).all()
            carved = pool.used
        agree(comm, pool.used == before, f"{before} bytes used, {carved} alive, "
                                         f"{pool.used} freed")
    alive = [pyar.allreduce_init(np.ones(1 << 17, np.float32), comm=c, timeout=WAIT)
             for _ in range(4)]
    for request in reversed(alive):
        request.free()
    agree(comm, pool.used == before, f"{pool.used} bytes used after freeing, {before} before")
    c.free()
