"""The pyar command (also python -m pyar): run, time, check, cost, draw and debug collectives.

Subcommands: info, bench, overlap, sim, model, tune, doctor, trace, verify and draw, each a
module of this package with its ``main(args)``; this module parses the command line for all
of them (one table of flags) and runs the one asked for.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from importlib.metadata import PackageNotFoundError, version as _dist_version

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


def version(name: str) -> str:
    """The installed distribution's version (pyar's own ``__version__`` from a source tree)."""
    try:
        return _dist_version(name)
    except PackageNotFoundError:
        from pyar import __version__
        return __version__


def _ranks_option(p, **kw) -> None:
    p.add_argument("-N", "--ranks", dest="nranks", metavar="N", **kw)


def _load_option(p) -> None:
    p.add_argument("--load", action="append", metavar="FILE.py|FILE.xml|MODULE",
                   help="import this module first (it may register_algorithm its own "
                        "algorithms, which then work as names here), or register this MSCCL "
                        "program (an msccl-tools algorithm XML) under its name; repeatable")


def build_parser() -> argparse.ArgumentParser:
    """The ``pyar`` command's parser, every help text plain."""
    parser = argparse.ArgumentParser(prog="pyar", description=__doc__.split("\n")[0])
    parser.add_argument("-V", "--version", action="version",
                        version=f"pyar {version('pyar')}", help="print pyar's version and exit")
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
    p.add_argument("--persistent", action="store_true",
                   help="also time the persistent forms: the MPI library's (MPI-4 "
                        "comm.Allreduce_init ...) beside its blocking call, and pyar's "
                        "(pyar.allreduce_init ...) as NAME_init rows; the ratio columns are "
                        "then against the faster of the library's two")
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
    _ranks_option(p, type=int, default=64, help="ranks (default 64)")
    p.add_argument("--count", type=int, default=4096,
                   help="elements per rank (default 4096)")
    p.add_argument("-d", "--dtype", default="float32", help="element type (default float32)")
    p.add_argument("--op", default="sum",
                   help="sum, prod, max, min or avg (default sum)")
    p.add_argument("--ranks-per-node", type=int, default=0,
                   help="emulate nodes of this many ranks (inter-node bytes: total over ranks)")
    p.add_argument("--collective", default="allreduce",
                   help="default allreduce; for allgather and alltoall --count counts one block")
    p.add_argument("--mode", choices=("auto", "data", "contributions", "traffic"),
                   default="auto",
                   help="data: every element moved and checked; contributions: which ranks' "
                        "contributions each chunk holds, checked (scales to 16K ranks); "
                        "traffic: messages matched and counted, and the model's time; auto "
                        "(default): data where it fits in memory and is quick, else "
                        "contributions")
    p.add_argument("--no-data", action="store_true", help="the same as --mode traffic")
    p.add_argument("--machine", metavar="FILE.json",
                   help="a machine description or tuning file for the model's time; with a "
                        "network entry (e.g. machines/torus-8x8.json) every message is routed "
                        "and the link columns are printed")
    _load_option(p)
    p = sub.add_parser("model", help="predicted times of algorithms (alpha-beta-gamma model) on "
                                     "this machine or a described one, no MPI")
    p.add_argument("-a", "--algo", default="all",
                   help="comma list of algorithms, or all (what auto chooses from)")
    _ranks_option(p, default=None,
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
    p = sub.add_parser("tune", help="measure alpha, beta, gamma, delta and the memory terms "
                                    "and write the tuning file (run under mpiexec -n 2)")
    p.add_argument("--quick", action="store_true", help="a short, rougher measurement")
    _load_option(p)
    p.add_argument("-o", "--output", default=None,
                   help="the file to write (default: $PYAR_TUNING_FILE, else "
                        "$XDG_CACHE_HOME/pyar/tuning-LIBRARY.json, LIBRARY the MPI library "
                        "and its version, e.g. tuning-mpich-5.0.2.json)")
    from pyar.verify import cases as verify_cases, driver as verify_defaults

    d = verify_defaults
    p = sub.add_parser("verify", help="check an allreduce, reduce_scatter or allgather (yours, "
                                      "pyar's, the MPI library's) against an exact reference, "
                                      "over many MPI jobs",
                       description=f"Check an allreduce, a reduce_scatter or an allgather "
                       f"against an exact reference, one MPI "
                       f"job per rank count. The defaults (--profile {d.PROFILE}, --ranks "
                       f"{d.RANKS}) take about 15 s for a target in Python or MPI, about 2 min "
                       f"for one of pyar's algorithms, on 2 cores; the full sweep is --profile "
                       f"full --ranks 1-8. A hang ends its rank count: the verdict there is "
                       f"'hangs', with the case. Exit status 0 only when every case ran and "
                       f"passed.")
    p.add_argument("target", nargs="*", help="module:function or path.py:function "
                   "(allreduce(x, comm, op='sum', out=None), reduce_scatter: the same, "
                   "allgather(x, comm, out=None)), pyar:ALGO, pyar:all (every algorithm of "
                   "the collective), mpi (the MPI library's), mpi:ALGO (its allreduce with "
                   "its algorithm ALGO forced by its own settings), torch:BACKEND "
                   "(torch.distributed's all_reduce: gloo, mpi, pyar, nccl); --list-targets "
                   "names them")
    p.add_argument("--list-targets", action="store_true", help="list the named targets for "
                   "the MPI library found (its mpiexec --version) and exit")
    p.add_argument("--collective", default="allreduce", choices=list(verify_cases.COLLECTIVES),
                   help="what the targets compute: allreduce (default), reduce_scatter (rank "
                   "r's result: block r of the reduction, as numpy.array_split cuts x.ravel()) "
                   "or allgather (every rank's x stacked, bit for bit)")
    p.add_argument("-N", "--ranks", default=d.RANKS,
                   help=f"rank counts, e.g. 1-8 or 2,3,5 (default {d.RANKS})")
    p.add_argument("--quick", action="store_true", help="the quick profile (--profile quick)")
    p.add_argument("--profile", default=d.PROFILE, choices=["full", "quick", "smoke"],
                   help=f"how many cases per dimension: full, quick, smoke (default {d.PROFILE})")
    p.add_argument("--dims", default=None, help="comma list of dimensions (default "
                   f"{','.join(verify_cases.DEFAULT_DIMENSIONS)}; also reproducible)")
    p.add_argument("--reproducible", action="store_true",
                   help="hold float sums and averages to reproducibility as well: the "
                   "dimension reproducible (every result the same bits with the contributions "
                   "reversed and rotated among the ranks, held by fewer ranks and cut into two "
                   "calls), every job with PYAR_REPRODUCIBLE=1 (pyar's own targets' switch)")
    p.add_argument("--skip", default=None, help="comma list of dimensions to leave out")
    p.add_argument("--nan", default="propagate", choices=["propagate", "mpi"],
                   help="float max/min: propagate (default, pyar's rule, stricter than MPI's): "
                   "NaN anywhere gives NaN and every rank the same bits; mpi (MPI_MAX/MPI_MIN, "
                   "undefined for NaN): where a NaN meets numbers, NaN or any of them, and "
                   "ranks may differ there and in the sign of a zero; and under mpi ranks may "
                   "differ in a NaN's payload (MPI defines none), under propagate not")
    p.add_argument("--int-overflow", default="wrap", choices=["wrap", "any"],
                   help="integer sum/prod that overflows: wrap (default, pyar's rule; C's for "
                   "unsigned types): modular for every integer type; any (C's): signed overflow "
                   "is undefined, so any result passes where a signed sum or prod overflows in "
                   "some order, while unsigned ones must wrap")
    p.add_argument("--case-timeout", type=float, default=d.CASE_TIMEOUT,
                   help=f"seconds a case may take before it counts as a hang "
                   f"(default {d.CASE_TIMEOUT:g})")
    p.add_argument("--time-limit", type=float, default=d.TIME_LIMIT,
                   help=f"seconds for the whole run, shrinking included; what it does not "
                   f"reach is reported, and the exit status is 1 (default {d.TIME_LIMIT:g})")
    p.add_argument("--mpiexec", default=None, help="the site's mpiexec command line, used as "
                   "it is, e.g. 'srun -p debug' (default $MPIEXEC, else the embedded one, with "
                   "what its MPI needs on one machine, as make's: pyar/runtime/launch.py)")
    _load_option(p)
    p.add_argument("--json", metavar="FILE", help="write every case's verdict")
    p.add_argument("--repro-dir", metavar="DIR", help="write the reproducers there "
                   "(repro_1.py, ...: the names the report gives them)")
    p.add_argument("--no-shrink", action="store_true", help="report failures unshrunk")
    p.add_argument("-v", "--verbose", action="store_true", help="log failures as they come")
    p = sub.add_parser("draw", help="a schedule as a picture (ranks as lanes, steps as "
                                    "columns) or, with --table, a per-step text table")
    p.add_argument("algo", help="a registered algorithm")
    _ranks_option(p, type=int, default=4,
                  help=f"ranks (default 4; the picture of arrows and the table up to "
                       f"{MAX_ARROWS} ranks, beyond it a step x rank heatmap of the bytes "
                       f"each rank sends: any rank count the simulator runs)")
    p.add_argument("--count", type=int, default=None,
                   help="elements (default: one per rank)")
    p.add_argument("--collective", default="allreduce", help="default allreduce")
    p.add_argument("-o", "--output", default=None, metavar="FILE.png|.svg",
                   help="write the drawing (default ALGO-N.png)")
    p.add_argument("--heatmap", action="store_true",
                   help="draw the step x rank heatmap at any rank count")
    p.add_argument("--table", action="store_true", help="print the per-step table instead")
    _load_option(p)
    _plain_help(parser)
    return parser


MAX_ARROWS = 62     # pyar draw's pictures of arrows and tables (cli/draw.py's MAX_RANKS)


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:        # (each subcommand's module, loaded when it runs: it imports what it needs)
        return importlib.import_module(f"{__name__}.{args.command}").main(args)
    except (ValueError, TypeError) as e:
        parser.exit(2, f"pyar {args.command}: {e}\n")


if __name__ == "__main__":
    sys.exit(main())
