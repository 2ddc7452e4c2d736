"""The ``pyar`` command (also ``python -m pyar``): ``info`` and ``bench``."""

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
    from pyar import bench as b

    rows = b.run(args.minbytes, args.maxbytes, args.stepfactor, args.iters, args.warmup,
                 args.algo, args.dtype, args.op)
    return 1 if any(row["wrong"] for row in rows) else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="pyar", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="versions, the MPI library, the registered algorithms")
    p = sub.add_parser("bench", help="time allreduce algorithms against MPI_Allreduce "
                                     "(run under mpiexec)")
    p.add_argument("-b", "--minbytes", default="8", help="smallest message (default 8)")
    p.add_argument("-e", "--maxbytes", default="4M", help="largest message (default 4M)")
    p.add_argument("-f", "--stepfactor", type=int, default=4, help="size multiplier (default 4)")
    p.add_argument("-n", "--iters", type=int, default=None,
                   help="timed iterations per size (default: by size)")
    p.add_argument("-w", "--warmup", type=int, default=5, help="untimed iterations (default 5)")
    p.add_argument("-a", "--algo", default="all", help="comma list of algorithms, or all")
    p.add_argument("-d", "--dtype", default="float32")
    p.add_argument("-o", "--op", default="sum")
    args = parser.parse_args(argv)
    try:
        return {"info": info, "bench": bench}[args.command](args)
    except (ValueError, TypeError) as e:
        parser.exit(2, f"pyar {args.command}: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
