"""``pyar sim``: simulate algorithms for many ranks in this process, no MPI.

``pyar sim`` builds each algorithm's schedule and simulates it for all ranks
at once in one of three modes, printed in each row: ``data`` (:func:`pyar.simulate`)
moves every element and checks every element of every rank's result against the
collective's postcondition; ``contributions`` (:func:`pyar.simulate_contributions`)
moves no element and checks which ranks' contributions each chunk holds, for rank
counts data does not fit; ``traffic`` (``--no-data``) counts, matches and checks the
messages only (bytes, steps, size and deadlock checks) and prints the cost model's
time. ``--mode auto`` (the default) runs data where its buffers fit in the memory free and
it is quick (:data:`DATA_ELEMENTS`), else contributions; ``--mode data`` where they do not
fit is a row saying how much it needs and the mode to use. The contribution mode streams
the algorithms that give their messages a step at a time (ring, segmented ring,
one-shot, two-shot: :class:`pyar.core.schedule.Waves`) without their table of every
transfer; every other mode, and the contribution mode of the others, reads the table, and
where it does not fit the row says so.
``--machine FILE.json`` costs them on that machine; if it
describes a network (:mod:`pyar.model.network`), every message is routed and
each algorithm's row gains the link columns: the bytes of the most loaded
link over the whole collective and which link it is, the sum over steps of
each step's most loaded link's bytes (what the congestion bound charges),
the mean and largest hops per message, and the bytes over global links
(tier 2: dragonfly global links, fat-tree and node uplinks).
``pyar model`` is in :mod:`pyar.cli.model`.
"""

from __future__ import annotations

import contextlib
import os
import resource
import sys
import time

import numpy as np

import pyar
from .. import collectives, verify
from ..algorithms import msccl
from ..core.ops import Op, accumulator, resolve
from ..kernels import reduce_into
from ..model import contributions, cost, sim, tuner
from .bench import parse_algorithms


def samples(size: int, n: int, dtype, op) -> np.ndarray:
    """``np.stack([verify.sample(r, n, dtype, op) for r in range(size)])``, made fast.

    :func:`pyar.verify.sample` is periodic in the index (1009; with the
    signed zeros of max and min, 13 * 1009), so each row is its first period
    repeated: one pass of writes for a GiB of inputs.
    """
    period = 13 * 1009 if resolve(op) in (Op.MAX, Op.MIN) else 1009
    out = np.empty((size, n), np.dtype(dtype))
    for r in range(size):
        row = out[r]
        row[:min(n, period)] = verify.sample(r, min(n, period), dtype, op)
        done = period
        while done < n:
            more = min(done, n - done)
            row[done:done + more] = row[:more]
            done += more
    return out


@contextlib.contextmanager
def small_pages():
    """Have numpy not ask the kernel for transparent huge pages while it lasts.

    numpy advises them (``madvise(MADV_HUGEPAGE)``) for every array of 4 MiB or more
    on Linux unless ``NUMPY_MADVISE_HUGEPAGE=0``; a simulation touches a GiB of
    fresh memory once, and on the VM of BENCHMARKS.md the first touch of a huge
    page cost up to 5.6 ms of system CPU (0.1 - 2.9 s for a GiB, no compaction
    stalls counted in /proc/vmstat) against 0.4 - 0.6 s for a GiB of 4 KiB pages.
    A no-op where numpy lacks the switch.
    """
    try:
        from numpy._core import multiarray  # numpy 2
    except ImportError:
        from numpy.core import multiarray  # numpy 1
    switch = getattr(multiarray, "_set_madvise_hugepage", lambda enabled: enabled)
    was = switch(False)                             # it returns the previous setting
    try:
        yield
    finally:
        switch(was)


def reference(record, inputs, op):
    """What each rank must get (:meth:`~pyar.collectives.Collective.expected`), computed
    before a simulation may overwrite ``inputs``. For allreduce, one ``(expected, scale)``
    for all ranks, summed a rank at a time (no stack of every rank's inputs)."""
    if record.name != "allreduce":
        return [record.expected(inputs, r, 0, op) for r in range(len(inputs))]
    if resolve(op) not in (Op.SUM, Op.AVG):
        return verify.reference(inputs, op), verify.magnitude(inputs, op)
    expected = np.zeros(np.asarray(inputs[0]).shape, np.float64)
    scale = np.zeros_like(expected)
    for x in inputs:
        x = np.asarray(x)
        if x.dtype.kind == "f":
            expected += x
            scale += np.abs(x)
        else:                       # integers: exact in the dtype, wrapping as in C
            return verify.reference(inputs, op), verify.magnitude(inputs, op)
    if resolve(op) is Op.AVG:
        expected /= len(inputs)
        scale /= len(inputs)
    return expected, scale


def wrong(record, outputs, expected, op) -> int:
    """Elements of the ranks' ``outputs`` that break the postcondition ``expected`` (from
    :func:`reference`). An allreduce's rank 0 is checked against it within the tolerance
    of :mod:`pyar.verify`, every other rank bit for bit against rank 0."""
    size = len(outputs)
    if record.name != "allreduce":
        bad = 0
        for out, (want, scale) in zip(outputs, expected):
            bad += (out is not None) if want is None else \
                verify.mismatches(out, want, op, size, scale).size
        return bad
    first = np.asarray(outputs[0]).reshape(-1)
    bad = verify.mismatches(first, expected[0], op, size, expected[1]).size
    bits = first.view(f"u{first.dtype.itemsize}")
    for out in outputs[1:]:
        bad += int(np.count_nonzero(np.asarray(out).reshape(-1).view(bits.dtype) != bits))
    return bad


def link_columns(traffic, network) -> str:
    """The link columns of a row (see the module docstring)."""
    busiest = traffic.max_link
    where = network.link_name(busiest) if busiest >= 0 else "-"
    _, step_max, _ = traffic.step_max()
    hops = traffic.hops
    return (f"{int(traffic.link_bytes.max(initial=0)):>12}  {where:<26}"
            f"{int(step_max.sum()):>12}{hops.mean() if hops.size else 0:>6.2f}"
            f"{int(hops.max(initial=0)):>4}{traffic.tier_bytes(network)['global']:>11}")


def _progress(name):
    start = time.perf_counter()

    def show(done, total):
        print(f"#   {name}: {done / total:.0%} of {total} steps, "
              f"{time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    return show


MODES = {"data": "data checked element by element",
         "contributions": "contributions checked chunk by chunk (no data)",
         "traffic": "traffic only (no data)",
         "auto": "data where it fits in memory and is quick, else contributions"}

DATA_ELEMENTS = 1 << 27     # auto's most elements received in data mode: 0.5 - 2 s here


def choose(mode: str, record, schedule, dtype, op, inputs_bytes: int, fits: bool) -> str:
    """The mode an algorithm runs in: ``mode``, or for ``auto`` data where its table of every
    transfer ``fits`` in the memory free, its buffers, a copy of the inputs and as much again
    for one wave's messages do too (:func:`pyar.model.sim.available_memory`), and its
    messages land at most :data:`DATA_ELEMENTS` elements; else contributions (traffic for a
    collective the contribution mode does not check)."""
    if mode != "auto":
        return mode
    checked = record.name in contributions.CHECKED
    if fits:
        table = schedule.table()
        wire = accumulator(dtype, resolve(op) if record.reduces else None, None)
        need = 2 * (sim.data_bytes(schedule, wire.itemsize) + inputs_bytes)
        received = int((table.hi - table.lo)[~table.send].sum())
        if need <= sim.available_memory() and (received <= DATA_ELEMENTS or not checked):
            return "data"
    return "contributions" if checked else "traffic"


def _inputs(record, size, shape, dtype, op):
    """Every rank's inputs and what they must give; MemoryError naming the bytes where
    they and their reference do not fit in the memory free."""
    need, free = 2 * size * int(np.prod(shape)) * dtype.itemsize, sim.available_memory()
    if need > free:
        raise MemoryError(f"data mode's inputs and reference need {need >> 20} MiB and "
                          f"{free >> 20} MiB is free: use --mode contributions")
    made = time.process_time()
    inputs = samples(size, int(np.prod(shape)), dtype, op).reshape(size, *shape)
    expected = reference(record, inputs, op)
    print(f"# inputs: {inputs.nbytes} bytes, made and reduced by numpy in "
          f"{time.process_time() - made:.1f} s of CPU", flush=True)
    return inputs, expected


@contextlib.contextmanager
def bounded_memory():
    """Have this process's address space end at what it maps now plus the memory free
    (:func:`pyar.model.sim.available_memory`) while it lasts, so that a schedule too large
    for the machine is a MemoryError here, not the kernel's OOM killer (which may pick
    another process). A no-op where the limit cannot be read or set."""
    try:
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        was = resource.getrlimit(resource.RLIMIT_AS)
        limit = mapped + sim.available_memory()
        if was[0] != resource.RLIM_INFINITY and was[0] < limit:
            limit = was[0]
        resource.setrlimit(resource.RLIMIT_AS, (limit, was[1]))
    except (OSError, ValueError):
        yield
        return
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, was)


@small_pages()
@bounded_memory()
def main(args) -> int:
    """``pyar sim``: see the module docstring."""
    msccl.load_all(args.load)
    record = collectives.collective(args.collective)
    names = [n for n in parse_algorithms(args.algo, args.collective) if n != "mpi"]
    topology = (pyar.Topology.regular(args.nranks, args.ranks_per_node)
                if args.ranks_per_node else None)
    size = args.nranks
    shape = record.shapes(size, args.count)[0] if record.count(1, size) else (0,)
    dtype = np.dtype(args.dtype)
    mode = "traffic" if args.no_data else args.mode
    nodes = f", {len(topology.nodes)} nodes" if topology else ""
    what = f"{args.count} {dtype} per {'block' if record.blocked else 'rank'}, {args.op}" \
        if record.count(1, size) else "no data"
    print(f"# pyar sim: {record.name} of {what}, {size} ranks{nodes}, in one process; "
          f"{MODES[mode]}")
    inputs = expected = None
    inputs_bytes = size * int(np.prod(shape)) * dtype.itemsize
    if record.reduces:                  # load the compiled kernel before anything is timed
        reduce_into(np.zeros(1, dtype), np.zeros(1, dtype), resolve(args.op).reduction)
    params = tuner.machine(args.machine)[0] if args.machine else tuner.parameters()
    network = params.network
    if network is not None:
        if size > network.size:
            raise ValueError(f"-N {size} ranks do not fit the network of {args.machine} "
                             f"({network.describe()}: {network.size} ranks)")
        print(f"# network: {network.describe()}; rank r on its endpoint r, {network.size} in all")
    model = "  model(us)" if mode == "traffic" else ""
    links = "" if network is None else (f"{'link max B':>12}  {'busiest link':<26}"
                                        f"{'step-max B':>12}{'hops':>6}{'max':>4}{'global B':>11}")
    print(f"# {'algorithm':<20}{'steps':>7}{'max sent':>12}{'mean sent':>12}{'messages':>10}"
          f"{'inter-node':>12}{'build s':>9}{'sim s':>8}{'(wall)':>8}{model}{links}  "
          f"{'mode':<14}correct  (s: CPU seconds of this process)", flush=True)
    failed, checking, checked = 0, 0.0, False
    for k, name in enumerate(names):
        start = time.process_time()
        schedule = pyar.schedule(name, size, record.count(int(np.prod(shape)), size),
                                 collective=record.name, topology=topology)
        streams = record.name in contributions.CHECKED and schedule.waves() is not None
        rows, free = sim.table_rows(schedule), sim.available_memory()
        try:
            ran = choose(mode, record, schedule, dtype, args.op,
                         0 if inputs is not None else inputs_bytes, rows * sim.ROW_BYTES <= free)
            if ran != "contributions" or not streams:  # the other modes read the table
                if rows * sim.ROW_BYTES > free:
                    raise MemoryError(f"about {rows:.3g} transfers, {sim.ROW_BYTES} bytes "
                                      f"each, and {free >> 20} MiB free")
                schedule.table()
        except MemoryError as e:
            hint = "; --mode contributions streams it a step at a time" if streams else ""
            print(f"  {name:<20}not run: its table of every transfer does not fit in memory "
                  f"({e}){hint}", flush=True)
            failed += 1
            continue
        built = time.process_time() - start
        start, wall = time.process_time(), time.perf_counter()
        predicted = ""
        try:
            if ran == "data" and inputs is None:
                inputs, expected = _inputs(record, size, shape, dtype, args.op)
                start, wall = time.process_time(), time.perf_counter()
            if ran == "traffic":
                result = pyar.simulate(schedule, dtype, op=args.op, data=False,
                                       progress=_progress(name), network=network)
                predicted = f"{cost.predict(schedule, params, dtype).time * 1e6:>11.1f}"
                verdict = "(not checked)"
            elif ran == "contributions":
                result = pyar.simulate_contributions(schedule, dtype, op=args.op,
                                                     progress=_progress(name), network=network)
                verdict = str(result.verdict)
                failed += not result.verdict.ok
            else:
                # the last algorithm works in the inputs themselves (a GiB is not copied)
                last = k == len(names) - 1
                result = pyar.simulate(schedule, inputs if last else inputs.copy(),
                                       op=args.op, overwrite=True, progress=_progress(name),
                                       network=network)
        except MemoryError as e:
            print(f"  {name:<20}{'':>7}{'':>12}{'':>12}{'':>10}{'':>12}{built:>9.1f}"
                  f"{'':>8}{'':>8}  {ran:<14}NO: {e}", flush=True)
            failed += 1
            continue
        seconds, wall = time.process_time() - start, time.perf_counter() - wall
        if ran == "data":
            start = time.process_time()
            bad = wrong(record, result.outputs, expected, args.op)
            checking += time.process_time() - start
            checked = True
            failed += bad
            verdict = "yes" if not bad else f"NO ({bad} wrong)"
        sent = [s.bytes_sent for s in result.stats]
        predicted += "" if network is None else link_columns(result.traffic, network)
        print(f"  {name:<20}{max(s.steps for s in result.stats):>7}{max(sent):>12}"
              f"{sum(sent) / len(sent):>12.0f}{sum(s.messages for s in result.stats):>10}"
              f"{sum(s.bytes_sent_inter_node for s in result.stats):>12}{built:>9.1f}"
              f"{seconds:>8.1f}{wall:>8.1f}{predicted}  {ran:<14}{verdict}", flush=True)
        del schedule, result
    if checked:
        print(f"# checked every element of every rank's result in {checking:.1f} s of CPU")
    return 1 if failed else 0
