"""Runs ``pyar bench`` under mpiexec after preparing pyar for a test (tests/unit/test_bench.py).

    mpiexec -n N python -m mpi4py tests/helpers/bench_driver.py MODE [OUTDIR] -- BENCH_ARGS...

MODE:
  broken     registers ``copy_left``: an allreduce that copies the left neighbour's
             data instead of reducing, which the bench must count as wrong
  no_torch   makes ``import torch`` fail, as on a machine without torch
  others     runs the bench once per collective other than allreduce
             (``--json OUTDIR/NAME.json``): every record the bench times
Exits with the bench's status (in others mode: any non-zero wins).
"""

import sys

import pyar
from pyar.cli.bench import collectives
from pyar.cli import main
from pyar.core.schedule import Chunk, Recv, Send, Step


def copy_left(rank, size, count, topology=None):
    if size == 1:
        return []
    everything = Chunk("data", 0, count)
    return [Step([Send((rank + 1) % size, everything),
                  Recv((rank - 1) % size, everything, reduce=False)])]


def run(mode, rest):
    split = rest.index("--")
    extra, args = rest[:split], rest[split + 1:]
    if mode == "broken":
        pyar.register_algorithm("copy_left")(copy_left)
        return main(["bench", *args])
    if mode == "no_torch":
        sys.modules["torch"] = None             # import torch now raises ImportError
        return main(["bench", *args])
    if mode == "others":
        status = 0
        for name in [n for n in collectives() if n != "allreduce"]:
            status = main(["bench", "--collective", name, "--json", f"{extra[0]}/{name}.json",
                           *args]) or status
        return status
    raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
