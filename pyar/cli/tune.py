"""``pyar tune``: measure the cost model's parameters on this machine and write the tuning file.

Run under mpiexec with 2 or more ranks; ranks 0 and 1 measure, so the file
describes the link between them (place them as the ranks of your jobs are
placed). What is measured, each the lower quartile of many timed calls:

- ``alpha``: the time a step of a small plan takes, as pyar runs it (on a
  :class:`~pyar.runtime.programs.Resident`: mailboxes in shared memory between
  ranks of a node, else persistent requests): the slope of the time of a
  pyar schedule of k one-element exchanges against k; ``resident`` is
  RESIDENT_BYTES, the largest buffer run that way.
- ``delta``: what a step adds on the runtime's general path: the same
  slope in a buffer above RESIDENT_BYTES, less alpha. The intercept of the
  small plan (pyar's overhead per call, the same for every algorithm) is
  reported, not used.
- ``beta``: the slope between two large MPI exchanges (both ways, on
  persistent requests).
- ``eager``, ``rendezvous``: MPI exchanges from 1 KiB to 256 KiB, sizes a
  factor of sqrt(2) apart: the first that, with the next, takes ``a/2``
  longer than ``a + size*beta`` predicts (``a``: an exchange of 8 bytes;
  beyond what the smallest sizes do) has passed the library's eager limit;
  the limit is then bisected to 64 bytes, and ``rendezvous`` is the median
  excess of the sizes up to 8 times it (:func:`find_eager`). No such step:
  no limit. (A small plan's messages within a node go through shared
  memory, where there is no such limit.)
- ``gamma`` per dtype: :func:`pyar.kernels.reduce_into` (sum) on arrays of
  :data:`FOLD_BYTES` (256 KiB), which stay in cache as the chunks a step
  folds mostly do.
- ``memory``, the memory terms (:mod:`pyar.model.cost`): for a float32 buffer of
  each of :data:`MEMORY_BYTES`, the time of a pyar schedule of one step in
  which both ranks send the buffer's first half and receive the other's into
  their second half, in place on the runtime's large-message path, copied
  (``beta``: seconds per byte sent), folded (``gamma``: the difference, per
  byte folded) and copied in 16 steps (``delta``: the difference, per step
  beyond the first), the three taken in turn.

Every wait between phases is bounded (:data:`PHASE_SECONDS`); within a
phase the ranks run a known number of blocking exchanges, and under
``python -m mpi4py`` a rank that fails aborts the job.
"""

from __future__ import annotations

import math
import platform
import time
import zlib

import numpy as np
from mpi4py import MPI

from .. import api
from ..algorithms import msccl, register_algorithm
from ..core import ops
from ..core.errors import TimeoutError
from ..core.schedule import Chunk, Recv, Send, Step
from ..kernels import reduce_into
from ..model import cost, tuner
from ..runtime import library, progress
from ..runtime.comm import Comm
from ..runtime.plan import RESIDENT_BYTES
from .model import describe_delta, describe_eager, describe_memory

PHASE_SECONDS = 600.0       # the longest any rank waits for the others between phases
FOLD_BYTES = 1 << 18        # the arrays gamma is measured on
MEMORY_BYTES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)    # the memory terms' buffers
STEPS = (1, 129)            # schedule lengths whose difference gives the per-step time
ATTEMPTS = 3                # measurements of that difference, twice the calls each time
_NAME = "_pyar_tune_steps"
SPLIT = 16                  # steps of the memory terms' split exchange (its delta)
_HALVES = {"_pyar_tune_exchange": (False, 1), "_pyar_tune_exchange_fold": (True, 1),
           "_pyar_tune_exchange_split": (False, SPLIT)}     # the memory terms' schedules: (fold, steps)


def _barrier(comm, seconds: float = PHASE_SECONDS) -> None:
    """A barrier that gives up after ``seconds`` (pyar.TimeoutError) instead of hanging."""
    progress.wait_for(comm.Ibarrier().Test, progress.deadline_of(seconds), lambda waited:
                      TimeoutError(f"pyar tune: rank {comm.Get_rank()} waited {waited:.0f} s "
                                   f"for the other ranks"))


def _typical(run, iters: int) -> float:
    """Seconds per call of ``run``: the lower quartile of ``iters`` timed calls, after a few."""
    return _typicals((run,), iters)[0]


def _typicals(runs, iters: int) -> list[float]:
    """Seconds per call of each of ``runs``: the lower quartile of ``iters`` timed calls of
    each, after a few, the runs taken in turn.

    Not the mean or even the median: on a shared machine a quarter of the
    calls or more can wait for a core (measured here: 10-20x the typical
    time), the longer calls more often, which would skew the slopes. In
    turns, so that a slow stretch of the machine slows every run alike.
    """
    for _ in range(3):
        for run in runs:
            run()
    times = np.empty((len(runs), iters))
    clock = time.perf_counter
    for i in range(iters):
        for j, run in enumerate(runs):
            start = clock()
            run()
            times[j, i] = clock() - start
    return [float(t) for t in np.percentile(times, 25, axis=1)]


def _exchange_time(pair, nbytes: int, iters: int) -> float:
    """Seconds per exchange of ``nbytes`` each way, posted as a resident step posts it."""
    peer = 1 - pair.Get_rank()
    out, into = np.zeros(nbytes, np.uint8), np.empty(nbytes, np.uint8)
    recv = pair.Recv_init([into, MPI.BYTE], peer, 0)
    send = pair.Send_init([out, MPI.BYTE], peer, 0)

    def exchange():
        recv.Start()
        send.Start()
        recv.Wait()
        send.Wait()

    _barrier(pair)
    try:
        return _typical(exchange, iters)
    finally:
        recv.Free()
        send.Free()


_PAD = RESIDENT_BYTES // 8 + 1  # float64 elements: a buffer this big runs on the general path


def _steps(rank, size, count, topology=None):
    """One-element exchanges with the partner rank (2 ranks only): ``count - _PAD`` of them in
    a buffer of ``count >= _PAD`` float64 elements (the runtime's general path), else
    ``count - 2`` (a small plan, on a Resident). Each sends what the one before received,
    as an algorithm's steps do: independent steps would overlap in the runtime's pipeline
    and measure a copy, not a step."""
    peer = 1 - rank
    return [Step([Send(peer, Chunk("data", i % 2, i % 2 + 1)),
                  Recv(peer, Chunk("data", 1 - i % 2, 2 - i % 2))])
            for i in range(count - _PAD if count >= _PAD else count - 2)]


def _step_times(pair, iters: int) -> tuple[float, float, float]:
    """(seconds per step on a Resident, seconds per call besides its steps there, seconds per
    step on the general path) of pyar's runtime: one Comm, both paths."""
    register_algorithm(_NAME)(_steps)       # registered only in a process that tunes
    comm = Comm(pair)

    def slope(pad):
        buffers = [np.zeros(pad + k, np.float64) for k in STEPS]
        calls = [lambda x=x: api.allreduce(x, x, algorithm=_NAME, comm=comm) for x in buffers]
        for call in calls:
            call()                      # compile the plans first
        for attempt in range(ATTEMPTS):
            _barrier(pair)
            times = pair.bcast(_typicals(calls, iters << attempt), root=0)    # retry alike
            per_step = (times[1] - times[0]) / (STEPS[1] - STEPS[0])
            if per_step > 0:
                return per_step, times[0] - per_step * STEPS[0]
        raise RuntimeError(f"pyar tune: a schedule of {STEPS[1]} steps never took longer than "
                           f"one of {STEPS[0]} ({ATTEMPTS} attempts, up to {iters << attempt} "
                           f"calls each): the machine is too busy to measure on")

    resident, per_call = slope(2)
    general, _ = slope(_PAD)
    comm.free()
    return resident, per_call, general


def _halves(fold: bool, steps: int):
    """A builder: each of 2 ranks sends its buffer's first half to the other and receives the
    other's into its second half (folded if ``fold``), in ``steps`` steps."""
    def exchange(rank, size, count, topology=None):
        half = count // 2
        cuts = [half * k // steps for k in range(steps + 1)]
        return [Step([Send(1 - rank, Chunk("data", lo, hi)),
                      Recv(1 - rank, Chunk("data", half + lo, half + hi), fold)])
                for lo, hi in zip(cuts, cuts[1:])]
    return exchange


def _memory(pair, iters: int) -> tuple:
    """The memory terms: ``(buffer bytes, beta, gamma, delta)`` for each of
    :data:`MEMORY_BYTES`, rank 0's measurement (broadcast)."""
    for name, shape in _HALVES.items():
        register_algorithm(name)(_halves(*shape))
    comm = Comm(pair)
    rows = []
    for nbytes in MEMORY_BYTES:
        x = np.ones(nbytes // 4, np.float32)
        calls = [lambda name=name: api.allreduce(x, x, algorithm=name, comm=comm)
                 for name in _HALVES]
        for call in calls:
            call()                      # compile the plans and carve their mailboxes
        _barrier(pair)
        copy, folded, split = pair.bcast(
            _typicals(calls, max(8, min(iters, (64 << 20) // nbytes))), root=0)
        rows.append((float(nbytes), 2 * copy / nbytes, 2 * max(0.0, folded - copy) / nbytes,
                     max(0.0, split - copy) / (SPLIT - 1)))
    comm.free()
    return tuple(rows)


EAGER_SIZES = tuple(int(1024 * 2 ** (k / 2)) // 64 * 64 for k in range(17))   # 1 - 256 KiB


def find_eager(measure, alpha: float, beta: float) -> tuple[float, float]:
    """``(eager, rendezvous)``: the largest message (bytes) ``measure(nbytes)`` (seconds per
    exchange) shows sent at once, and the median extra time of larger ones; ``(inf, 0)``
    when there is no such step.

    The excess of a size is its time over ``alpha + size*beta``, less the
    median excess of the three smallest sizes (so that an alpha measured low
    or high shifts nothing). The limit is passed at the first size of
    :data:`EAGER_SIZES` whose excess, and the next size's, exceed ``alpha/2``;
    it is then bisected to 64 bytes. Under MPI, ``measure``, ``alpha`` and ``beta``
    must be the same on both ranks (rank 0's, broadcast), so that they bisect alike.
    """
    def excess(nbytes):
        return measure(nbytes) - alpha - nbytes * beta

    found = {n: excess(n) for n in EAGER_SIZES}
    base = float(np.median([found[n] for n in EAGER_SIZES[:3]]))
    late = [a for a, b in zip(EAGER_SIZES[3:], EAGER_SIZES[4:])
            if min(found[a], found[b]) - base > alpha / 2]
    if not late:
        return math.inf, 0.0
    hi = late[0]
    lo = EAGER_SIZES[EAGER_SIZES.index(hi) - 1]
    while hi - lo > 64:
        mid = (lo + hi) // 2
        if excess(mid) - base > alpha / 2:
            hi = mid
        else:
            lo = mid
    beyond = [found[n] - base for n in EAGER_SIZES if hi <= n <= 8 * hi]
    return float(lo), max(0.0, float(np.median(beyond)))


def _gamma(nbytes: int, iters: int) -> dict:
    gamma = {}
    for dtype in ops.DTYPES:
        dst, src = (np.ones(nbytes // dtype.itemsize, dtype) for _ in range(2))
        gamma[dtype.name] = _typical(lambda: reduce_into(dst, src, "sum"), iters) / nbytes
    return gamma


def run(quick: bool = False, comm=None):
    """Measure on ranks 0 and 1 of ``comm`` (COMM_WORLD); rank 0 returns (Params, measured).

    ``measured`` records how: the number of ranks, rank 0's host and whether
    rank 1 shared it, the MPI library, pyar's overhead per call, the date.
    Other ranks return None.
    """
    comm = MPI.COMM_WORLD if comm is None else comm
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        raise ValueError("pyar tune measures between two ranks: run it under mpiexec -n 2 "
                         "(or more)")
    small, large = 1 << 20, 4 << 20
    iters = 20 if quick else 300
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    result = None
    if pair != MPI.COMM_NULL:
        latency = _exchange_time(pair, 8, iters * 10)
        t_small = _exchange_time(pair, small, iters)
        t_large = _exchange_time(pair, large, iters)
        beta = max(0.0, (t_large - t_small) / (large - small))
        latency, beta = pair.bcast((latency, beta), root=0)    # both ranks bisect alike
        eager, rendezvous = find_eager(
            lambda n: pair.bcast(_exchange_time(pair, n, iters), root=0), latency, beta)
        alpha, per_call, per_step = _step_times(pair, iters)
        memory = _memory(pair, iters)
        host = platform.node()
        crc = zlib.crc32(host.encode())
        crcs = np.array([crc, -crc], np.int64)
        pair.Allreduce(MPI.IN_PLACE, crcs, MPI.MIN)
        if rank == 0:
            gamma = _gamma(FOLD_BYTES, iters)
            params = cost.Params(alpha, beta, gamma, max(0.0, per_step - alpha), eager,
                                 rendezvous, RESIDENT_BYTES, memory=memory)
            measured = {"ranks": size, "host": host, "same_host": int(crcs[0]) == -int(crcs[1]),
                        "mpi": library.current().description,
                        "per_call_overhead": max(0.0, per_call), "mpi_latency": latency,
                        "quick": quick,
                        "date": time.strftime("%Y-%m-%d %H:%M:%S %z")}
            result = params, measured
        _barrier(pair)
        pair.Free()
    _barrier(comm)
    return result


def main(args) -> int:
    """``pyar tune``: measure under mpiexec (ranks 0 and 1), write the tuning file on rank 0."""
    msccl.load_all(args.load)
    path = args.output or tuner.tuning_path()
    result = run(quick=args.quick)
    if MPI.COMM_WORLD.Get_rank() == 0:
        params, measured = result
        tuner.save(path, params, measured)
        print(f"# pyar tune: ranks 0 and 1 of {measured['ranks']}, "
              f"{'same host' if measured['same_host'] else 'two hosts'}, {measured['mpi']}")
        print(f"alpha {params.alpha * 1e6:.3g} us  beta {params.beta * 1e9:.3g} ns/B "
              f"({1e-9 / params.beta if params.beta else float('inf'):.3g} GB/s)  "
              f"delta {describe_delta(params)}  "
              f"(per call {measured['per_call_overhead'] * 1e6:.3g} us)")
        print(f"eager limit {describe_eager(params)}")
        print("gamma (ns/B): " + ", ".join(f"{k} {v * 1e9:.3g}"
                                           for k, v in params.gamma.items()))
        print(f"memory terms {describe_memory(params)}")
        print(f"# wrote {path}")
    return 0
