"""Nonblocking collectives: every collective and algorithm in flight together, completed in
orders that differ between ranks, interleaved with blocking calls and the user's own
point-to-point traffic; results bitwise those of the blocking calls."""

import warnings

import numpy as np
import pytest

import pyar
from pyar.algorithms import algorithm
from pyar.collectives import records

from checks import agree, call, inputs, same

CASES = [(r.name, a) for r in records() for a in pyar.algorithms(r.name)
         if a == "mpi" or algorithm(a, r.name).auto]     # the built-ins, not the tests' own


@pytest.mark.sweep
@pytest.mark.parametrize("collective,algorithm", CASES)
def test_many_in_flight_completed_in_shuffled_orders(comm, collective, algorithm):
    """Six calls of two sizes (one small enough for mailboxes, one not) in flight, with a
    blocking call and user traffic (same tags) between them, waited for in a per-rank
    order; each equals the blocking call on the same input."""
    record = pyar.collectives.collective(collective)
    root = comm.size - 1
    xs = [inputs(record, comm, count, seed) for seed, count in
          enumerate([3, 20000, 7, 20001, 1, 0])]
    expected = [call(record, x.copy(), algorithm, False, root) for x in xs]
    requests, user = [], np.zeros(1, np.int64)
    peer_right, peer_left = (comm.rank + 1) % comm.size, (comm.rank - 1) % comm.size
    for i, x in enumerate(xs):
        requests.append(call(record, x.copy(), algorithm, True, root))
        if i == 2:      # a blocking call while others are in flight
            middle = call(record, xs[0].copy(), algorithm, False, root)
        comm.Sendrecv(np.array([i], np.int64), peer_right, 1, user, peer_left, 1)  # user traffic
    order = np.random.default_rng(comm.rank).permutation(len(requests))
    results = {}
    for i in order:
        results[i] = requests[i].wait(timeout=60)
    wrong = [i for i in range(len(xs)) if not same(results[i], expected[i])]
    if not same(middle, expected[0]):
        wrong.append("blocking in the middle")
    agree(comm, not wrong and all(r.done for r in requests),
          f"{collective} {algorithm}: wrong {wrong}")


def test_wait_all_test_any_and_request_state(comm):
    xs = [np.full(10, comm.rank + i, np.float32) for i in range(4)]
    requests = [pyar.iallreduce(x, algorithm="ring") for x in xs]
    seen = set()
    while len(seen) < len(requests):
        i = pyar.test_any([r for j, r in enumerate(requests) if j not in seen])
        if i is not None:
            seen.add([j for j in range(len(requests)) if j not in seen][i])
    results = pyar.wait_all(requests)
    total = sum(range(comm.size))
    agree(comm, all(np.array_equal(r, np.full(10, total + i * comm.size, np.float32))
                    for i, r in enumerate(results)) and requests[0].result is results[0],
          f"{results}")
    request = pyar.iallreduce(np.ones(3), algorithm="mpi")
    before = request.done
    value = request.wait()
    agree(comm, request.done and np.array_equal(value, np.full(3, comm.size)) and
          (before or not before), repr(request))
    with pytest.raises(ValueError, match="timeout must be"):
        pyar.iallreduce(np.ones(3), timeout=-1)


def test_a_wait_that_times_out_leaves_the_request_in_flight(comm):
    """Rank 0 waits 0.2 s for a call the others make 0.6 s late: TimeoutError, and the same
    request completes when waited for again; a call's own timeout fails it for good."""
    import time

    if comm.size == 1:
        pytest.skip("needs another rank")
    mine = pyar.Comm(comm)
    x = np.arange(1000, dtype=np.float64) + comm.rank
    pyar.allreduce(x, algorithm="ring", comm=mine)     # the plan agreed on: no wait in the call
    first = second = None
    if comm.rank != 0:
        time.sleep(0.6)
    request = pyar.iallreduce(x, algorithm="ring", comm=mine)
    if comm.rank == 0:
        try:
            request.wait(timeout=0.2)
        except pyar.TimeoutError as e:
            first = e
    result = request.wait(timeout=60)
    want = np.arange(1000, dtype=np.float64) * comm.size + sum(range(comm.size))
    if comm.rank == 0:          # now the call's own timeout, with the others not calling
        late = pyar.iallreduce(x, algorithm="ring", comm=mine, timeout=0.2)
        while not late.test():          # its own timeout, seen by test() too
            pass
        for _ in range(2):
            try:
                late.wait()
            except pyar.TimeoutError as e:
                second = e
    comm.Barrier()
    ok = np.array_equal(result, want) and (comm.rank != 0 or (
        isinstance(first, pyar.TimeoutError) and isinstance(second, pyar.TimeoutError)
        and late.done))
    agree(comm, ok, f"first {first!r}, second {second!r}")


def test_a_dropped_request_warns_and_later_calls_are_right(comm):
    """A request dropped before it completed warns; one complete already need not (the rank
    that starts it last may complete it at once, its peers' messages in: seen under Open
    MPI, whose shared-memory transport copies a large message from its sender directly)."""
    x = np.arange(50000, dtype=np.float64) + comm.rank
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        request = pyar.iallreduce(x, algorithm="ring")
        finished = request.done
        del request                                     # dropped
    warned = any(issubclass(w.category, ResourceWarning) and "dropped" in str(w.message)
                 for w in caught) or finished or comm.size == 1
    y = pyar.allreduce(x, algorithm="ring")
    want = np.arange(50000, dtype=np.float64) * comm.size + sum(range(comm.size))
    agree(comm, warned and np.array_equal(y, want), f"warned {warned}, {y[:3]} vs {want[:3]}")


def test_a_progress_thread_completes_requests_nobody_waits_for(comm):
    import time

    x = np.arange(1 << 18, dtype=np.float32) + comm.rank
    with pyar.Progress():
        requests = [pyar.iallreduce(x, algorithm=a) for a in ("ring", "rabenseifner")]
        deadline = time.monotonic() + 60
        while not all(r.done for r in requests) and time.monotonic() < deadline:
            time.sleep(0.001)                           # no pyar call: the thread progresses
        done = all(r.done for r in requests)
        results = pyar.wait_all(requests)
    want = np.arange(1 << 18, dtype=np.float32) * comm.size + sum(range(comm.size))
    agree(comm, done and all(np.array_equal(r, want) for r in results), f"done {done}")


def test_library_requests_begin_in_call_order_with_a_progress_thread(comm):
    """MPI's own collectives match in the order they are started: with a progress thread,
    two ``mpi`` requests waited for in opposite orders on different ranks (one rank waiting
    at once, the other after the thread had time) still pair up right."""
    import time

    a = (comm.rank + 1) * 1000.0 + np.arange(8)
    b = (comm.rank + 1) * 10.0 + np.arange(8)
    pyar.allreduce(a, algorithm="mpi")
    with pyar.Progress():
        first = pyar.iallreduce(a, algorithm="mpi")
        second = pyar.iallreduce(b, algorithm="mpi")
        if comm.rank == 0:
            got2, got1 = second.wait(timeout=60), first.wait(timeout=60)
        else:
            time.sleep(0.3)
            got1, got2 = first.wait(timeout=60), second.wait(timeout=60)
    want1 = sum((r + 1) * 1000.0 + np.arange(8) for r in range(comm.size))
    want2 = sum((r + 1) * 10.0 + np.arange(8) for r in range(comm.size))
    agree(comm, np.array_equal(got1, want1) and np.array_equal(got2, want2),
          f"{got1[:2]} {got2[:2]}")


def test_nonblocking_cupy_stand_in(comm):
    """The device path's requests (staged through pinned host memory), on the stand-in."""
    import sys

    import fake_cupy        # (tests/helpers: on the path by tests/conftest.py)

    fake_cupy.install()
    cupy = sys.modules["cupy"]
    host = np.arange(1000, dtype=np.float32) + comm.rank
    requests = [pyar.iallreduce(cupy.asarray(host + i), algorithm="ring") for i in range(3)]
    results = [r.wait(timeout=60).get() for r in reversed(requests)][::-1]
    want = np.arange(1000, dtype=np.float32) * comm.size + sum(range(comm.size))
    agree(comm, all(np.array_equal(r, want + i * comm.size) for i, r in enumerate(results)),
          f"{[r[:2] for r in results]}")
