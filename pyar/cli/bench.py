"""``pyar bench``: nccl-tests for pyar, against the MPI library's own collective.

Run under mpiexec; rank 0 prints one row per message size and implementation:
the MPI library's own call (the bare mpi4py call, its arguments bound
beforehand, no pyar code around it: the baseline, always timed), each pyar
algorithm asked for, and with
``--peer gloo`` torch.distributed's gloo. At each size they are timed in up
to :data:`BATCHES` interleaved batches, out of place and in place, each batch
starting one implementation later than the one before (none always follows
the same neighbour, whose buffers it would find in or out of cache), so load
on the machine falls on all of them alike. Time is the slowest rank's average per call, each batch
starting after a barrier, as in nccl-tests; ``algbw`` is size / time and
``busbw`` algbw times the collective's nccl-tests factor, which makes it
comparable across rank counts and collectives. Outside the timed batches each
implementation runs once more on fresh input and ``#wrong`` counts, over all
ranks, the elements that differ from the MPI library's result beyond the
dtype's tolerance (:mod:`pyar.verify`).

Sizes follow nccl-tests: for a blocked collective (allgather, reduce_scatter,
alltoall) the size is the bytes of the big buffer (all ranks' blocks) and
``count`` the elements of one block. Everything about a collective comes from
its record (:mod:`pyar.collectives`): one registered there is benchmarked too.
"""

from __future__ import annotations

import functools
import inspect
import json
import os
import re
import sys
import time
from typing import Callable, NamedTuple

import mpi4py
import numpy as np
from mpi4py import MPI

import pyar
from .. import api, verify
from ..algorithms import AUTO, LIBRARY, algorithms, check_name, msccl, split_names
from ..collectives import Collective, collective as record_of, records
from ..core import ops
from ..model import tuner
from ..runtime import library
from ..runtime.baseline import library_call
from ..runtime.comm import Comm
from .plot import pyplot

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
ROOT = 0                  # of reduce and bcast
BATCHES = 16              # timed batches per implementation and size, interleaved
OUT_OF_PLACE, IN_PLACE = "out_of_place", "in_place"
VARIANTS = (OUT_OF_PLACE, IN_PLACE)
GLOO = "gloo"
INIT = "_init"              # the persistent form's rows: NAME_init
LIBRARY_INIT = LIBRARY + INIT


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
    """Timed calls per implementation: as the OSU benchmarks, 1,000 for small messages (a
    barrier's skew, a microsecond or more, then weighs on no call), fewer from 16 KiB, down
    to 2 from 8 MiB."""
    return int(min(1000, max(2, (16 << 20) // nbytes)))


def default_warmup(nbytes: int) -> int:
    """Untimed calls before timing (the first builds pyar's plan and compiles kernels; the
    next ones bind buffers): a tenth of the timed ones, at least one."""
    return max(1, default_iters(nbytes) // 10)


def parse_algorithms(text: str, collective: str = "allreduce") -> list[str]:
    """A comma list of algorithm names (see :func:`pyar.algorithms.split_names`), ``all``
    (every registered one) and ``auto``."""
    names = []
    for name in split_names(text):
        for found in (algorithms(collective) if name == "all" else [name]):
            if found not in names:
                names.append(found)
    return names


# -- the collectives: their records (pyar.collectives) are nccl-tests' per-collective table ------

def collectives() -> list[str]:
    """The collectives the bench times: every registered record that moves data (not barrier,
    whose count is 0 whatever x is: it has no sizes to sweep)."""
    return [r.name for r in records() if r.count(1, 2) > 0]


def entry(name: str) -> Collective:
    """The record of ``name``; ValueError listing the collectives the bench times otherwise."""
    if name not in collectives():
        raise ValueError(f"collective must be one of {', '.join(collectives())}, got {name!r}")
    return record_of(name)


def variants(record: Collective) -> tuple:
    """The bench's rows of ``record``: out of place where its result can live apart from x, in
    place where it works in x and its result is x's shape (out is x). Judged at 2 ranks, so
    the rows do not depend on the rank count (at 1 a block is all of x)."""
    x_shape, out_shape = record.shapes(2, 1)
    return tuple(v for v, has in ((OUT_OF_PLACE, record.out_of_place),
                                  (IN_PLACE, record.in_place and x_shape == out_shape)) if has)


def _gets_result(record: Collective, rank: int, size: int) -> bool:
    """Whether ``rank`` gets a result (its postcondition is not None: not so off reduce's
    root), asked of the record on a tiny input."""
    x_shape, _ = record.shapes(size, 1)
    inputs = [np.ones(x_shape)] * size
    return record.expected(inputs, rank, ROOT, ops.Op.SUM)[0] is not None


def _library(record: Collective, m: MPI.Comm, x, out, op) -> Callable:
    """The MPI library's own collective from x into out (``out is x``: in place) as a callable
    of no arguments: the bare mpi4py call, its buffers and op resolved beforehand, as a program
    would write it (resolved at each call, they cost ~1 us more per call at 1 KiB, flattering
    pyar's small sizes); then avg's division where this rank has the result."""
    bare = library_call(record, m, x, out, op.reduction if record.reduces else None, ROOT)
    if not (record.reduces and op is ops.Op.AVG and (not record.rooted or m.rank == ROOT)):
        return bare

    def run():
        bare()
        np.divide(out, m.size, out=out)
    return run


def _pyar_call(record: Collective, algorithm: str, comm, op):
    """``call(x, out)`` -> a no-argument callable running pyar's collective on those buffers:
    the API's function of that name where pyar has one (allreduce's keeps its fast path for
    repeated calls), else the generic :func:`pyar.collective`. Bound as a program would call
    it, as the library's call is (:func:`_library`): no Python frame of the bench's around
    it, and only the arguments that differ from the function's defaults (keywords bound in a
    partial take CPython's slower call path, 0.1 - 0.2 us a call)."""
    function = getattr(api, record.name, None)
    if not callable(function):
        function = functools.partial(api.collective, record.name)
    given = {"algorithm": algorithm, "comm": comm}
    if record.reduces:
        given["op"] = op
    if record.rooted:
        given["root"] = ROOT
    defaults = inspect.signature(function).parameters
    kwargs = {k: v for k, v in given.items() if v != defaults[k].default}
    if not record.out_of_place:                 # bcast: in place by definition, no out
        return lambda x, out: functools.partial(function, x, **kwargs)
    return lambda x, out: functools.partial(function, x, out, **kwargs)


def _persistent_call(record: Collective, algorithm: str, comm, op):
    """``call(x, out)`` -> a no-argument callable that starts pyar's persistent request on those
    buffers (``pyar.allreduce_init`` ..., made once, collectively) and waits for it."""
    init = getattr(api, f"{record.name}_init")
    given = {"algorithm": algorithm, "comm": comm}
    if record.reduces:
        given["op"] = op
    if record.rooted:
        given["root"] = ROOT

    def call(x, out):
        request = init(x, **given) if not record.out_of_place else init(x, out, **given)
        start, wait = request.start, request.wait

        def run():
            start()
            return wait()
        run.free = request.free     # (once timed: its shared memory for the next size)
        return run
    return call


def _library_persistent_call(record: Collective, comm: Comm, op):
    """``call(x, out)`` -> the MPI library's own persistent collective (MPI-4,
    ``comm.Allreduce_init`` ...) on those buffers, made once: a no-argument callable that
    starts it and waits for it (then avg's division, as :func:`_library`)."""
    m = comm.mpi
    widened = _persistent_call(record, LIBRARY, comm, op)

    def call(x, out):
        if record.reduces and x.dtype in ops.HALF:
            return widened(x, out)
        request = library_call(record, m, x, out, op.reduction if record.reduces else None,
                               ROOT, "init")()
        start, wait = request.Start, request.Wait
        average = record.reduces and op is ops.Op.AVG and (not record.rooted or
                                                            m.rank == ROOT)

        def run():
            start()
            wait()
            if average:
                np.divide(out, m.size, out=out)
        run.free = request.Free
        return run
    return call


def _nothing() -> None:
    pass


def _library_call(record: Collective, comm: Comm, op):
    """``call(x, out)`` -> :func:`_library` on those buffers."""
    m = comm.mpi
    widened = _pyar_call(record, LIBRARY, comm, op)

    def call(x, out):
        if record.reduces and x.dtype in ops.HALF:  # MPI has no half types: pyar's "mpi"
            return widened(x, out)                  # widens them to float32 around the call
        return _library(record, m, x, out, op)
    return call


# -- the optional peer: torch.distributed's gloo -------------------------------------------------

_GLOO_DTYPES = ("int8", "uint8", "int32", "int64", "float32", "float64")


def gloo_peer(comm: Comm, name: str, dtype: np.dtype, op):
    """``call(x, out)`` for torch.distributed's gloo allreduce (in place) on the ranks of ``comm``.

    Joins a gloo process group over loopback TCP: rank 0 opens the rendezvous
    store on a free port and sends the port to the others over MPI. All ranks
    must share one node. ValueError if torch is missing or cannot do this.
    """
    if name != "allreduce":     # the one name test here: gloo's peer is its all_reduce alone
        raise ValueError(f"--peer gloo times allreduce only, not {name}")
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        raise ValueError(f"--peer gloo needs torch (pip install torch), which is not importable "
                         f"here: {e}") from None
    if not dist.is_available() or not dist.is_gloo_available():
        raise ValueError("--peer gloo: this torch has no gloo backend")
    if dtype.name not in _GLOO_DTYPES:
        raise ValueError(f"--peer gloo: gloo reduces {', '.join(_GLOO_DTYPES)}, not {dtype}")
    node = comm.mpi.Split_type(MPI.COMM_TYPE_SHARED)
    one_node = node.Get_size() == comm.size
    node.Free()
    if not one_node:
        raise ValueError("--peer gloo rendezvous over loopback: all ranks must share one node")
    if not dist.is_initialized():
        _join_gloo(comm, dist)
    reduce_op = {ops.Op.SUM: dist.ReduceOp.SUM, ops.Op.AVG: dist.ReduceOp.SUM,
                 ops.Op.PROD: dist.ReduceOp.PRODUCT, ops.Op.MAX: dist.ReduceOp.MAX,
                 ops.Op.MIN: dist.ReduceOp.MIN}[op]
    size = comm.size

    def call(x, out):
        tensor = torch.from_numpy(x)            # shares x's memory

        def run():
            dist.all_reduce(tensor, reduce_op)
            if op is ops.Op.AVG:
                tensor.div_(size)
            return x
        return run
    return call


def _join_gloo(comm: Comm, dist) -> None:
    import datetime
    import socket

    if "GLOO_SOCKET_IFNAME" not in os.environ and any(n == "lo" for _, n in
                                                      socket.if_nameindex()):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    timeout = datetime.timedelta(seconds=60)
    port = np.zeros(1, np.int64)
    store = None
    if comm.rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, comm.size, True, timeout=timeout,
                              wait_for_workers=False)
        port[0] = store.port
    comm.mpi.Bcast(port, root=0)
    if comm.rank != 0:
        store = dist.TCPStore("127.0.0.1", int(port[0]), comm.size, False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=comm.rank, world_size=comm.size,
                            timeout=timeout)


# -- timing and checking --------------------------------------------------------------------------

def _batches(iters: int) -> list[int]:
    k = min(iters, BATCHES)
    return [iters // k + (i < iters % k) for i in range(k)]


def _time_interleaved(m: MPI.Comm, runs: list, iters: int, warmup: int) -> list[float]:
    """Seconds per call of each of ``runs``: the slowest rank's average over ``iters`` calls,
    timed in batches that take turns, each after a barrier."""
    for run in runs:
        for _ in range(warmup):
            run()
    spent = np.zeros(len(runs))
    for k, batch in enumerate(_batches(iters)):
        for i in [(k + j) % len(runs) for j in range(len(runs))]:   # each batch one later
            run = runs[i]
            m.Barrier()
            start = time.perf_counter()
            for _ in range(batch):
                run()
            spent[i] += time.perf_counter() - start
    spent /= iters
    m.Allreduce(MPI.IN_PLACE, spent, MPI.MAX)
    return spent.tolist()


class _Oracle(NamedTuple):
    expected: np.ndarray | None     # the MPI library's result here (None: nothing to check here)
    scale: np.ndarray | None        # what the rounding error of a reduction is relative to


def _oracle(record: Collective, m: MPI.Comm, pristine, out_shape, op) -> _Oracle:
    """The MPI library's own result on ``pristine`` input and, for reductions, its tolerance scale
    (the same collective of the magnitudes in float64)."""
    in_place_only = not record.out_of_place
    x = pristine.copy()
    if record.reduces and x.dtype in ops.HALF:      # MPI has no half types: on float32
        x = x.astype(np.float32)
    out = x if in_place_only else np.empty(out_shape, x.dtype)
    _library(record, m, x, out, op)()
    scale = None
    if record.reduces:
        magnitude = np.abs(pristine.astype(np.float64))
        scale = magnitude if in_place_only else np.empty(out_shape, np.float64)
        _library(record, m, magnitude, scale, ops.Op.PROD if op is ops.Op.PROD else
                 ops.Op.AVG if op is ops.Op.AVG else ops.Op.SUM)()
    if not _gets_result(record, m.rank, m.size):
        return _Oracle(None, None)
    return _Oracle(out, scale)


def _count_wrong(record: Collective, oracle: _Oracle, result, op, size: int) -> int:
    if oracle.expected is None:
        return 0
    expected = oracle.expected.reshape(-1)
    if result is None or np.size(result) != expected.size:
        return expected.size
    differ = np.flatnonzero(np.asarray(result).reshape(-1) != expected)
    if not record.reduces or not differ.size:
        return differ.size
    # only the elements that differ need the tolerance (which is many passes over the data)
    return verify.mismatches(np.asarray(result).reshape(-1)[differ], expected[differ], op, size,
                             oracle.scale.reshape(-1)[differ]).size


def _check(m: MPI.Comm, record: Collective, oracle: _Oracle, impls, runs, x, out, pristine,
           op) -> list:
    """#wrong of each of ``runs`` (of ``impls``), summed over ranks: one untimed call each on
    fresh input, into an ``out`` filled with junk first so that a call which writes nothing is
    caught; the MPI library's result is ``out``, pyar's what the call returns."""
    wrong = np.zeros(len(runs), np.int64)
    for i, (impl, run) in enumerate(zip(impls, runs)):
        np.copyto(x, pristine)
        if out is not x:
            out.view(np.uint8).fill(0xA5)
        result = run()
        wrong[i] = _count_wrong(record, oracle, out if impl.name in (LIBRARY, LIBRARY_INIT)
                                else result, op, m.size)
    m.Allreduce(MPI.IN_PLACE, wrong, MPI.SUM)
    return wrong.tolist()


# -- the run ---------------------------------------------------------------------------------------

class Implementation(NamedTuple):
    name: str             # "mpi", a pyar algorithm or "auto", or a peer
    call: Callable        # call(x, out) -> run, a no-argument callable returning the result
                          # (the MPI library's: its result is out)
    variants: tuple       # out of place, in place, or both


def _measure(seconds: float, nbytes: int, factor: float, wrong) -> dict:
    algbw = nbytes / seconds / 1e9
    return {"time_us": seconds * 1e6, "algbw": algbw, "busbw": algbw * factor, "wrong": wrong}


def _auto_choice(record: Collective, c: Comm, x: np.ndarray) -> str:
    """What ``auto`` runs for ``x`` (the call pyar's API makes: on the record's count)."""
    count = record.count(x.size, c.size)
    return tuner.select(record.name, AUTO, c.size, count, count * x.dtype.itemsize, x.dtype,
                        topology=c.topology)


def run(*, collective="allreduce", minbytes="8", maxbytes="4M", stepfactor=4, iters=None,
        warmup=None, check=1, algos="all,auto", dtype="float32", op="sum", peer=None,
        persistent=False, file=sys.stdout, comm=None) -> dict:
    """Benchmark, printing on rank 0; returns the report (config, rows, summary) on every rank.

    ``iters`` and ``warmup`` None choose by size (:func:`default_iters`,
    :func:`default_warmup`). ``persistent``: also the persistent forms, the MPI library's
    (``mpi_init``) and pyar's (``NAME_init``), and the ratios against the faster of the
    library's blocking and persistent calls. ValueError/TypeError for bad arguments,
    before any timing.
    """
    c = Comm.of(comm)
    m, size = c.mpi, c.size
    record = entry(collective)
    rows_of = variants(record)
    op = ops.resolve(op)
    dtype = ops.check_dtype(dtype)
    if record.reduces:
        ops.check(op, dtype)
    if check not in (0, 1):
        raise ValueError(f"check must be 0 or 1, got {check!r}")
    if (iters is not None and iters < 1) or (warmup is not None and warmup < 0):
        raise ValueError("need iters >= 1 and warmup >= 0")
    if peer not in (None, GLOO):
        raise ValueError(f"peer must be {GLOO!r}, got {peer!r}")
    steps = sizes(parse_size(minbytes), parse_size(maxbytes), int(stepfactor))
    names = [n for n in parse_algorithms(algos, collective) if n != LIBRARY]
    for name in names:
        if name != AUTO:
            check_name(name, collective)
    persistent = persistent and callable(getattr(api, f"{record.name}_init", None))
    impls = [Implementation(LIBRARY, _library_call(record, c, op), rows_of)]
    if persistent:
        impls.append(Implementation(LIBRARY_INIT, _library_persistent_call(record, c, op),
                                    rows_of))
    impls += [Implementation(n, _pyar_call(record, n, comm, op), rows_of)
              for n in names]
    if persistent:
        impls += [Implementation(f"{n}{INIT}", _persistent_call(record, n, comm, op), rows_of)
                  for n in names]
    if peer == GLOO:
        impls.append(Implementation(GLOO, gloo_peer(c, collective, dtype, op), (IN_PLACE,)))

    config = dict(
        collective=collective, baseline=record.library_name, ranks=size, dtype=dtype.name,
        op=str(op) if record.reduces else "none", minbytes=steps[0],
        maxbytes=parse_size(maxbytes),
        stepfactor=int(stepfactor), iters=iters, warmup=warmup, check=check,
        algorithms=[i.name for i in impls], root=ROOT if record.rooted else None,
        pyar_algo=os.environ.get("PYAR_ALGO"), pyar=pyar.__version__,
        mpi_library=library.current().description,
        mpi4py=mpi4py.__version__, numpy=np.__version__, python=sys.version.split()[0])
    say = (lambda line: print(line, file=file, flush=True)) if c.rank == 0 else (lambda _: None)
    for line in _header(config):
        say(line)

    rows = []
    primary = rows_of[0]
    pyar_names = [n for n in names if n != AUTO]
    for nbytes in steps:
        total = max(nbytes // dtype.itemsize, 1)
        count = max(total // size, 1) if record.blocked else total
        x_shape, out_shape = record.shapes(size, count)
        span = max(int(np.prod(x_shape)), int(np.prod(out_shape))) * dtype.itemsize
        pristine = verify.sample(c.rank, int(np.prod(x_shape)), dtype,
                                 op if record.reduces else ops.Op.SUM).reshape(x_shape)
        n_iters = iters or default_iters(span)
        n_warmup = default_warmup(span) if warmup is None else warmup
        oracle = _oracle(record, m, pristine, out_shape, op) if check else None
        found = {impl.name: {} for impl in impls}
        for variant in VARIANTS:
            active = [impl for impl in impls if variant in impl.variants]
            if not active:
                continue
            x = pristine.copy()
            out = x if variant == IN_PLACE else np.empty(out_shape, dtype)
            runs = [impl.call(x, out) for impl in active]
            # peers come last and are timed on their own: the threads of torch's gloo slowed
            # the busy-polling MPI ranks batched next to it (seen on 2 cores)
            ours = sum(impl.name != GLOO for impl in active)
            with np.errstate(over="ignore", invalid="ignore"):     # repeated in-place sums
                seconds = (_time_interleaved(m, runs[:ours], n_iters, n_warmup)
                           + _time_interleaved(m, runs[ours:], n_iters, n_warmup))
            wrong = (_check(m, record, oracle, active, runs, x, out, pristine, op) if check
                     else [None] * len(runs))
            for impl, t, w in zip(active, seconds, wrong):
                found[impl.name][variant] = _measure(t, span, record.factor(size), w)
            for run in runs:        # persistent requests: freed once timed and checked
                getattr(run, "free", _nothing)()
        best = min((found[n][primary]["time_us"] for n in pyar_names), default=None)
        libraries = [n for n in (LIBRARY, LIBRARY_INIT) if n in found]
        baseline = {v: min(found[n][v]["time_us"] for n in libraries)
                    for v in found[LIBRARY]}     # the faster of the library's calls
        for impl in impls:
            mine = found[impl.name]
            main = mine.get(primary) or mine[IN_PLACE]
            row = dict(
                size=span, count=count, type=dtype.name, redop=config["op"],
                algorithm=impl.name,
                chosen=_auto_choice(record, c, pristine) if impl.name == AUTO else None,
                iters=n_iters, warmup=n_warmup,
                out_of_place=mine.get(OUT_OF_PLACE), in_place=mine.get(IN_PLACE),
                vs_mpi={v: mine[v]["time_us"] / baseline[v] for v in mine if v in baseline},
                vs_best=(main["time_us"] / best
                         if best and impl.name not in (LIBRARY, LIBRARY_INIT, GLOO)
                         and not impl.name.endswith(INIT) else None))
            rows.append(row)
            say(_format_row(row))
    summary = _summary(rows, check)
    for line in _footer(summary):
        say(line)
    return {"config": config, "rows": rows, "summary": summary}



# -- output -----------------------------------------------------------------------------------------

def _header(config: dict) -> list[str]:
    by_size = "by size"
    return [
        f"# pyar bench: {config['collective']}, {config['ranks']} ranks, {config['dtype']} "
        f"{config['op']}, baseline {config['baseline']} (timed in the same run)",
        f"# minBytes {config['minbytes']} maxBytes {config['maxbytes']} step: "
        f"{config['stepfactor']}(factor) warmup iters: {config['warmup'] or by_size} "
        f"iters: {config['iters'] or by_size} validation: {config['check']}"
        + (f" root: {config['root']}" if config["root"] is not None else ""),
        f"# algorithms: {', '.join(config['algorithms'])}"
        + (f"   PYAR_ALGO={config['pyar_algo']}" if config["pyar_algo"] else ""),
        f"# MPI library: {config['mpi_library']}",
        f"# pyar {config['pyar']}, mpi4py {config['mpi4py']}, numpy {config['numpy']}, "
        f"python {config['python']}",
        "#",
        f"# {'':62}{'out-of-place':^33}{'in-place':^33}{'time / mpi':^14}",
        f"# {'size':>10}{'count':>11}{'type':>9}{'redop':>6}  {'algorithm':<24}"
        + f"{'time':>10}{'algbw':>8}{'busbw':>8}{'#wrong':>7}" * 2
        + f"{'oop':>7}{'ip':>7}{'best':>7}",
        f"# {'(B)':>10}{'(elements)':>11}{'':>9}{'':>6}  {'':<24}"
        + f"{'(us)':>10}{'(GB/s)':>8}{'(GB/s)':>8}{'':>7}" * 2,
    ]


def _cells(measure) -> str:
    """The columns of one variant, each led by a space however wide its number grows."""
    if measure is None:
        return f"{'N/A':>10}{'N/A':>8}{'N/A':>8}{'N/A':>7}"
    wrong = "N/A" if measure["wrong"] is None else measure["wrong"]
    return (f" {measure['time_us']:>9.1f} {measure['algbw']:>7.3f} {measure['busbw']:>7.3f}"
            f" {wrong:>6}")


def _ratio(value) -> str:
    return f" {value:>6.2f}" if value is not None else f"{'':>7}"


def _format_row(row: dict) -> str:
    name = row["algorithm"] + (f":{row['chosen']}" if row["chosen"] else "")
    return (f"  {row['size']:>10}{row['count']:>11}{row['type']:>9}{row['redop']:>6}  "
            f"{name:<24}{_cells(row['out_of_place'])}{_cells(row['in_place'])}"
            f"{_ratio(row['vs_mpi'].get(OUT_OF_PLACE))}{_ratio(row['vs_mpi'].get(IN_PLACE))}"
            f"{_ratio(row['vs_best'])}")


AUTO_REGRET_BOUND = 1.10      # auto's contract: within 10% of the fastest pyar algorithm


def _summary(rows: list[dict], check: int) -> dict:
    """Per implementation the mean busbw over its rows (both variants, as nccl-tests averages),
    the same over all pyar algorithms, the wrong elements, and auto's regret at each size."""
    busbw: dict[str, list] = {}
    for row in rows:
        for variant in VARIANTS:
            if row[variant] is not None:
                busbw.setdefault(row["algorithm"], []).append(row[variant]["busbw"])
    pyar_values = [v for name, values in busbw.items()
                   if name not in (LIBRARY, LIBRARY_INIT, GLOO) for v in values]
    regret = [{"size": row["size"], "chosen": row["chosen"], "regret": row["vs_best"]}
              for row in rows if row["algorithm"] == AUTO and row["vs_best"] is not None]
    return {
        "avg_busbw": float(np.mean(pyar_values)) if pyar_values else None,
        "avg_busbw_by_algorithm": {name: float(np.mean(v)) for name, v in busbw.items()},
        "wrong": (sum(row[v]["wrong"] for row in rows for v in VARIANTS if row[v] is not None)
                  if check else None),
        "auto_regret": regret,
    }


def _footer(summary: dict) -> list[str]:
    wrong = summary["wrong"]
    lines = ["# Wrong elements       : "
             + ("not checked" if wrong is None else f"{wrong} {'OK' if not wrong else 'FAILED'}")]
    if summary["avg_busbw"] is not None:
        lines.append(f"# Avg bus bandwidth    : {summary['avg_busbw']:.3f} GB/s "
                     "(pyar's algorithms; each below)")
    for name, value in summary["avg_busbw_by_algorithm"].items():
        lines.append(f"#   {name:<20}{value:>10.3f}")
    regret = summary["auto_regret"]
    if regret:
        worst = max(regret, key=lambda r: r["regret"])
        within = sum(r["regret"] <= AUTO_REGRET_BOUND for r in regret)
        lines.append(f"# auto regret (its time over the fastest pyar algorithm's): worst "
                     f"{worst['regret']:.2f}x at {format_size(worst['size'])}B; within "
                     f"{AUTO_REGRET_BOUND - 1:.0%} at {within} of {len(regret)} sizes")
    return lines


def write_json(report: dict, path: str) -> None:
    with open(path, "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")


def plot(report: dict, path: str) -> None:
    """Two panels against size: time (log-log, where small messages can be compared) and bus
    bandwidth (algbw at 1 rank, where busbw is 0); out of place solid, in place dashed;
    ``auto`` and the MPI library drawn thick, the other algorithms thin; the x axis ends at
    the data; titled with the collective, dtype, rank count and MPI library."""
    plt = pyplot()
    config = report["config"]
    metric = "busbw" if entry(config["collective"]).factor(config["ranks"]) else "algbw"
    fig, (times, bandwidths) = plt.subplots(1, 2, figsize=(13, 5.2), dpi=110)
    tab10 = plt.get_cmap("tab10").colors     # red, blue: auto's and gloo's alone
    colours = iter([tab10[i] for i in (1, 2, 4, 5, 6, 7, 8, 9)] * 4)
    for name in config["algorithms"]:
        rows = [row for row in report["rows"] if row["algorithm"] == name]
        if name in (LIBRARY, AUTO, GLOO):
            style = {LIBRARY: dict(color="black", linewidth=2.6, zorder=5),
                     AUTO: dict(color="tab:red", linewidth=2.6, zorder=6),
                     GLOO: dict(color="tab:blue", linewidth=2.2, zorder=4)}[name]
            label = f"{name} ({config['baseline']})" if name == LIBRARY else name
        else:
            style, label = dict(color=next(colours), linewidth=1, alpha=0.7), name
        for variant, dashes in ((OUT_OF_PLACE, "-"), (IN_PLACE, "--")):
            points = [(row["size"], row[variant]["time_us"], row[variant][metric])
                      for row in rows if row[variant] is not None]
            if not points:
                continue
            sizes, us, bw = zip(*points)
            for ax, values in ((times, us), (bandwidths, bw)):
                ax.plot(sizes, values, linestyle=dashes, marker="o", markersize=2.5,
                        label=label, **style)
            label = None            # one legend entry per implementation
    sizes = [row["size"] for row in report["rows"]]
    for ax in (times, bandwidths):
        ax.set_xscale("log", base=2)
        ax.set_xlim(min(sizes), max(sizes))
        ax.xaxis.set_major_formatter(lambda value, _: format_size(int(value)))
        ax.set_xlabel("size (bytes)")
        ax.grid(True, which="both", alpha=0.3)
    times.set_yscale("log")
    times.set_ylabel("time per call (us)")
    times.set_title("time (lower is better)", fontsize=10)
    bandwidths.set_ylabel(f"{'bus' if metric == 'busbw' else 'algorithm'} bandwidth (GB/s)")
    bandwidths.set_title(f"{metric} (higher is better)", fontsize=10)
    bandwidths.set_ylim(bottom=0)
    handles, labels = times.get_legend_handles_labels()
    handles += [plt.Line2D([], [], color="gray", linestyle="-"),
                plt.Line2D([], [], color="gray", linestyle="--")]
    labels += ["out of place", "in place"]
    bandwidths.legend(handles, labels, fontsize=8, loc="upper left")
    mpi_library = " ".join(config["mpi_library"].split())
    fig.suptitle(f"pyar bench: {config['collective']}, {config['dtype']} {config['op']}, "
                 f"{config['ranks']} ranks, {mpi_library}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(args) -> int:
    """``pyar bench``: what the command line asked, on every rank; rank 0 writes the table,
    and the JSON and plot if asked."""
    msccl.load_all(args.load)
    if args.plot:
        pyplot()                        # missing matplotlib fails before anything is timed
    if args.trace:
        os.environ["PYAR_TRACE"] = args.trace     # read when the first Comm is made
    report = run(collective=args.collective, minbytes=args.minbytes, maxbytes=args.maxbytes,
                 stepfactor=args.stepfactor, iters=args.iters, warmup=args.warmup,
                 check=args.check, algos=args.algo, dtype=args.dtype, op=args.op,
                 peer=args.peer, persistent=args.persistent)
    if MPI.COMM_WORLD.Get_rank() == 0:
        if args.json:
            write_json(report, args.json)
            print(f"# json: {args.json}", flush=True)
        if args.plot:
            plot(report, args.plot)
            print(f"# plot: {args.plot}", flush=True)
    return 1 if report["summary"]["wrong"] else 0
