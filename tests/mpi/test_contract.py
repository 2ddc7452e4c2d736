"""The API contract under MPI: an interrupted call, freed communicators, and checks that
fail on some ranks only; each must be an error on every rank, never a hang."""

import gc
import weakref

import numpy as np
import pytest

import pyar
from pyar.runtime import persistent
from pyar.runtime import progress

from checks import agree

pytestmark = pytest.mark.timeout(120)


def outcome(call):
    try:
        call()
    except BaseException as e:      # KeyboardInterrupt too: judged collectively below
        return e
    return None


def test_a_call_interrupted_mid_way_makes_its_communicator_unusable(comm):
    """Rank 0 is interrupted (KeyboardInterrupt, through the event hook) between the two steps
    of a large ring allreduce: its later calls on that communicator raise, naming the call,
    and the other ranks, left waiting for its second step, hear of it (pyar.runtime.notice)
    or time out, naming it."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    mine = pyar.Comm(comm)
    x = np.ones(1 << 16, np.float64)
    pyar.allreduce(x, algorithm="ring", comm=mine)          # compiled and agreed

    def interrupt(event, run, step):
        if event == "complete" and step == 0:
            raise KeyboardInterrupt

    if comm.rank == 0:
        progress.listen(interrupt)
    try:
        first = outcome(lambda: pyar.allreduce(x, algorithm="ring", comm=mine, timeout=3))
    finally:
        progress.unlisten(interrupt)
    later = outcome(lambda: pyar.allreduce(x, algorithm="ring", comm=mine))
    if comm.rank == 0:
        ok = isinstance(first, KeyboardInterrupt) and isinstance(later, pyar.PyarError) and \
            "allreduce #2 on rank 0 (ring" in str(later) and "unusable" in str(later)
    else:
        told = "rank 0 failed allreduce #2 on rank 0 (ring" in str(first)
        ok = (isinstance(first, pyar.TimeoutError) or told) and "allreduce #2" in str(first) and \
            isinstance(later, pyar.PyarError) and "unusable" in str(later)
    agree(comm, ok, f"first {first!r}, later {later!r}")


def test_a_freed_communicator_is_not_kept_alive(comm):
    """Repeated signatures are remembered per communicator and forgotten when it is freed."""
    sub = comm.Dup()
    x = np.ones(8)
    for _ in range(3):
        pyar.allreduce(x, comm=sub)
    held = weakref.ref(pyar.Comm.of(sub))
    remembered = any(r.c is held() for r in persistent._cache.values())
    sub.Free()
    gc.collect()
    agree(comm, remembered and held() is None,
          f"remembered {remembered}, still alive {held() is not None}")


def test_an_out_refused_on_one_rank_is_an_error_on_every_rank(comm):
    """A reduce_scatter whose out has the wrong length on rank 0 only, on a first call: rank 0
    says what array_split gives, the others which rank was refused; none hangs; the next
    call works."""
    if comm.size == 1:
        pytest.skip("needs another rank")
    x = np.arange(10.0 * comm.size + 1)
    n = len(np.array_split(x, comm.size)[comm.rank])
    out = np.empty(n + (comm.rank == 0))
    error = outcome(lambda: pyar.reduce_scatter(x, out, algorithm="pairwise"))
    if comm.rank == 0:
        ok = isinstance(error, ValueError) and "numpy.array_split" in str(error) and \
            f"has {n}; got {n + 1}" in str(error)
    else:
        ok = isinstance(error, ValueError) and "rank 0's arguments" in str(error)
    again = pyar.reduce_scatter(x, algorithm="pairwise")
    agree(comm, ok and again.shape == (n,), f"{error!r}")
