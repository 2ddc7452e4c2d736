"""``pyar overlap``: how much of the gradient allreduces a step can hide behind compute.

Run under mpiexec. A training step is modelled as DDP runs one: ``buckets``
gradient buckets of ``nbytes`` float32 each become ready one after another,
each after ``compute`` seconds of work that does not hold the GIL (the CPU's
view of a GPU's backward pass: ``time.sleep``; ``--numpy`` makes it numpy
work instead, which holds the GIL part of the time), and each bucket's
allreduce (sum) is launched as soon as it is ready. Timed, each the median
over ``repeats`` steps, the slowest rank's, every variant in every round:

- ``compute``: the work alone; ``communication``: the allreduces alone, blocking;
- ``blocking``: work, then each bucket's blocking allreduce (no overlap);
- ``nonblocking``: ``iallreduce`` per bucket, waited for at the end, progressed
  only by pyar's own calls (the next launch, the final wait);
- ``progress thread``: the same inside ``pyar.Progress()``, whose thread advances
  the requests while the work runs.

``hidden`` is the share of the communication time a variant saved against
``blocking``: ``(blocking - variant) / communication``. With a progress
thread a step can take no less than the compute plus the last bucket's
allreduce, which nothing follows.
"""

from __future__ import annotations

import sys
import time

import numpy as np
from mpi4py import MPI

import pyar
from .bench import parse_size


def _work(seconds: float, numpy_work: bool, scratch: np.ndarray) -> None:
    if not numpy_work:
        time.sleep(seconds)
        return
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        np.multiply(scratch, 1.0000001, out=scratch)


def run(*, buckets=4, nbytes=4 << 20, compute=0.02, repeats=10, numpy_work=False,
        algorithm="auto", file=sys.stdout, comm=None) -> dict:
    """Time the variants of the module docstring; rank 0 prints them. Returns seconds per step
    of each variant (the medians), on every rank."""
    c = pyar.Comm.of(comm)
    grads = [np.full(nbytes // 4, c.rank + 1.0, np.float32) for _ in range(buckets)]
    scratch = np.ones(1 << 16, np.float64)

    def compute_only():
        for _ in grads:
            _work(compute, numpy_work, scratch)

    def communication():
        for g in grads:
            pyar.allreduce(g, g, algorithm=algorithm, comm=c)

    def blocking():
        for g in grads:
            _work(compute, numpy_work, scratch)
            pyar.allreduce(g, g, algorithm=algorithm, comm=c)

    def nonblocking():
        requests = []
        for g in grads:
            _work(compute, numpy_work, scratch)
            requests.append(pyar.iallreduce(g, g, algorithm=algorithm, comm=c))
        pyar.wait_all(requests)

    def threaded():
        with pyar.Progress():
            nonblocking()

    variants = {"compute": compute_only, "communication": communication,
                "blocking": blocking, "nonblocking": nonblocking, "progress thread": threaded}
    for step in variants.values():          # warm: plans, kernels, the thread's first start
        step()
    seconds = {name: [] for name in variants}
    for _ in range(repeats):
        for name, step in variants.items():
            c.mpi.Barrier()
            start = time.perf_counter()
            step()
            took = np.array([time.perf_counter() - start])
            c.mpi.Allreduce(MPI.IN_PLACE, took, MPI.MAX)
            seconds[name].append(float(took[0]))
    median = {name: float(np.median(v)) for name, v in seconds.items()}
    if c.rank == 0:
        _report(median, buckets, nbytes, compute, repeats, numpy_work, c.size, file)
    return median


def _report(median, buckets, nbytes, compute, repeats, numpy_work, size, file) -> None:
    say = (lambda line: print(line, file=file, flush=True))
    comm_time, blocked = median["communication"], median["blocking"]
    bound = max(median["compute"], comm_time)
    say(f"# pyar overlap: {buckets} buckets x {nbytes} B float32 allreduce, {size} ranks, "
        f"{compute * 1e3:g} ms of {'numpy' if numpy_work else 'GIL-free'} work per bucket; "
        f"medians of {repeats} steps")
    say(f"# {'variant':<18}{'ms/step':>10}{'x max(compute, comm)':>22}{'hidden':>9}")
    for name, value in median.items():
        hidden = "" if name in ("compute", "communication") else \
            f"{(blocked - value) / comm_time:>9.0%}" if comm_time else ""
        say(f"  {name:<18}{value * 1e3:>10.2f}{value / bound:>22.2f}{hidden}")


def main(args) -> int:
    """``pyar overlap``: what the command line asked."""
    run(buckets=args.buckets, nbytes=parse_size(args.bytes), compute=args.compute_ms / 1e3,
        repeats=args.repeats, numpy_work=args.numpy, algorithm=args.algo)
    return 0
