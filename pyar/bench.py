"""``pyar bench``: time every allreduce algorithm against MPI_Allreduce, checking each result.

Run under mpiexec; rank 0 prints one row per size and algorithm as it
completes. Every rank uses the same sizes and iteration counts, so the ranks
stay in step. Time per call is the slowest rank's average over the timed
iterations; ``vs mpi`` is that time over the bare ``comm.Allreduce``'s (no
pyar code around it) at the same size, so it includes all of pyar's overhead.
"""

from __future__ import annotations

import re
import sys
import time

import numpy as np
from mpi4py import MPI

from . import api, ops, tuner, verify
from .algorithms import LIBRARY, algorithms
from .comm import Comm
from .executors.mpi import library_allreduce, library_op

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from ``8``, ``64K``, ``4M``, ``1G`` (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"size must look like 8, 64K, 4M or 1G, got {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def format_size(nbytes: int) -> str:
    for unit in ("G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


def sizes(minbytes: int, maxbytes: int, factor: int) -> list[int]:
    if minbytes < 1 or maxbytes < minbytes or factor < 2:
        raise ValueError("need 1 <= minbytes <= maxbytes and a step factor >= 2")
    out, n = [], minbytes
    while n <= maxbytes:
        out.append(n)
        n *= factor
    return out


def default_iters(nbytes: int) -> int:
    """Enough iterations to time small messages well, few for large ones."""
    return int(min(500, max(10, (16 << 20) // nbytes)))


def _call(comm: Comm, x, out, op, algorithm):
    """One allreduce of ``x`` into ``out``; ``mpi`` is the bare MPI_Allreduce, no pyar around it
    (for half types: on float32, as pyar's ``mpi`` algorithm does it)."""
    if algorithm == LIBRARY and x.dtype in ops.HALF:     # no MPI type: widened to float32
        return lambda: (np.copyto(out, x), library_allreduce(comm.mpi, out, op.reduction),
                        ops.finalize(out, op, comm.size))
    if algorithm == LIBRARY:
        mpi_op, size = library_op(op.reduction), comm.size
        if op is ops.Op.AVG:
            return lambda: (comm.mpi.Allreduce(x, out, mpi_op), np.divide(out, size, out=out))
        return lambda: comm.mpi.Allreduce(x, out, mpi_op)
    return lambda: api.allreduce(x, out, op=op, algorithm=algorithm, comm=comm)


def _time(comm: Comm, call, iters, warmup) -> float:
    for _ in range(warmup):
        call()
    comm.mpi.Barrier()
    start = time.perf_counter()
    for _ in range(iters):
        call()
    elapsed = np.array([(time.perf_counter() - start) / iters])
    comm.mpi.Allreduce(MPI.IN_PLACE, elapsed, MPI.MAX)
    return float(elapsed[0])


def _wrong(comm: Comm, result, x, op) -> int:
    """Elements of ``result`` that differ from MPI_Allreduce's beyond tolerance, summed over ranks."""
    expected, scale = verify.library_reference(comm.mpi, x, op)
    wrong = np.array([verify.mismatches(result, expected, op, comm.size, scale).size])
    comm.mpi.Allreduce(MPI.IN_PLACE, wrong, MPI.SUM)
    return int(wrong[0])


def parse_algorithms(text: str, collective: str = "allreduce") -> list[str]:
    """``all`` or a comma list of algorithm names."""
    if text == "all":
        return algorithms(collective)
    return [name.strip() for name in text.split(",") if name.strip()]


def run(minbytes="8", maxbytes="4M", stepfactor=4, iters=None, warmup=5, algos="all",
        dtype="float32", op="sum", file=sys.stdout, comm=None) -> list[dict]:
    """Benchmark and print; returns the rows (on every rank)."""
    c = Comm.of(comm)
    op = ops.resolve(op)
    dtype = ops.check_dtype(dtype)
    ops.check(op, dtype)
    names = [LIBRARY] + [n for n in parse_algorithms(algos) if n != LIBRARY]
    for name in names:
        tuner.select("allreduce", name, c.size, 0, 0)      # unknown names fail here
    say = (lambda line: print(line, file=file, flush=True)) if c.rank == 0 else (lambda _: None)
    say(f"# pyar bench: allreduce, {dtype} {op}, {c.size} ranks, "
        f"{MPI.Get_library_version().splitlines()[0].strip()}")
    say(f"# {'algorithm':<20}{'size':>8}{'count':>10}{'iters':>7}{'time(us)':>12}"
        f"{'vs mpi':>8}  correct")
    rows = []
    for nbytes in sizes(parse_size(minbytes), parse_size(maxbytes), int(stepfactor)):
        count = max(nbytes // dtype.itemsize, 1)
        x = verify.sample(c.rank, count, dtype, op)
        out = np.empty_like(x)
        n = iters or default_iters(nbytes)
        baseline = None
        for name in names:
            seconds = _time(c, _call(c, x, out, op, name), n, warmup)
            baseline = baseline or seconds
            wrong = _wrong(c, out, x, op)
            row = dict(algorithm=name, bytes=count * dtype.itemsize, count=count, iters=n,
                       time_us=seconds * 1e6, ratio=seconds / baseline, wrong=wrong)
            rows.append(row)
            say(f"  {name:<20}{format_size(row['bytes']):>8}{count:>10}{n:>7}"
                f"{row['time_us']:>12.1f}{row['ratio']:>8.2f}  {'yes' if not wrong else f'NO ({wrong} wrong)'}")
    return rows
