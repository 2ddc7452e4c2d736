"""The ``pyar`` command (also ``python -m pyar``): ``info``, ``bench`` and ``sim``."""

from __future__ import annotations

import argparse
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
    from pyar.algorithms import COLLECTIVES

    library = MPI.Get_library_version().strip().splitlines()
    print(f"pyar {pyar.__version__}")
    print(f"python {platform.python_version()} ({sys.executable})")
    for package in ("numpy", "mpi4py", "mpich", "numba", "ml_dtypes"):
        print(f"{package} {_version(package)}")
    print(f"MPI library: {library[0].strip() if library else 'unknown'}")
    print("MPI standard: {}.{}".format(*MPI.Get_version()))
    print(f"ranks: {MPI.COMM_WORLD.Get_size()}")
    print(f"PYAR_ALGO: {os.environ.get('PYAR_ALGO', '(unset)')}")
    for collective in COLLECTIVES:
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


def sim(args) -> int:
    import time

    import numpy as np

    import pyar
    from pyar import verify
    from pyar.bench import parse_algorithms

    names = [n for n in parse_algorithms(args.algo) if n != "mpi"]
    schedules = [pyar.schedule(name, args.nranks, args.count) for name in names]
    inputs = [verify.sample(r, args.count, args.dtype, args.op) for r in range(args.nranks)]
    expected = verify.reference(inputs, args.op)
    scale = verify.magnitude(inputs, args.op)
    print(f"# pyar sim: allreduce of {args.count} {args.dtype} per rank, {args.op}, "
          f"{args.nranks} ranks, in one process")
    print(f"# {'algorithm':<20}{'steps':>7}{'max sent':>12}{'mean sent':>12}{'messages':>10}"
          f"{'seconds':>9}  correct")
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
              f"{seconds:>9.1f}  {'yes' if not bad else f'NO ({bad} wrong)'}", flush=True)
    return 1 if wrong else 0


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
    p = sub.add_parser("sim", help="simulate algorithms for many ranks in this process: "
                                   "steps, traffic, time, correctness")
    p.add_argument("-a", "--algo", default="all", help="comma list of algorithms, or all")
    p.add_argument("-n", "--nranks", type=int, default=64)
    p.add_argument("-c", "--count", type=int, default=4096, help="elements per rank")
    p.add_argument("-d", "--dtype", default="float32")
    p.add_argument("-o", "--op", default="sum")
    args = parser.parse_args(argv)
    try:
        return {"info": info, "bench": bench, "sim": sim}[args.command](args)
    except (ValueError, TypeError) as e:
        parser.exit(2, f"pyar {args.command}: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
