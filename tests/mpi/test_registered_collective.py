"""A collective pyar does not have, registered from a test file (tests/unit/test_new_collective.py),
through the API under MPI (its algorithm and the MPI library's own call) and the bench.

The record is registered at import, so every rank knows it before any test runs (every rank
imports the same modules in the same order)."""

import io
import sys
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import pyar
import pyar.cli.bench
from pyar.core.ops import DTYPES, Op
from pyar.verify import sample

from checks import agree

sys.path.append(str(Path(__file__).parents[1] / "unit"))     # (the record's own file)
from test_new_collective import GATHER, register  # noqa: E402

register()                  # (its algorithm with auto=True: auto chooses from it too)


@pytest.mark.sweep
@pytest.mark.parametrize("algorithm", ["linear", "mpi"])
def test_gather_through_the_api(comm, algorithm):
    size, rank = comm.size, comm.rank
    for root in sorted({0, size - 1, size // 2}):
        for dtype in DTYPES:
            for shape in [(0,), (1,), (7,), (3, 2)]:
                x = sample(rank, int(np.prod(shape)), dtype, Op.SUM, seed=root).reshape(shape)
                everyone = np.empty((size, *shape), x.dtype)
                comm.Allgather([np.ascontiguousarray(x), x.nbytes, MPI.BYTE],
                               [everyone, x.nbytes, MPI.BYTE])
                want, _ = GATHER.expected(list(everyone), rank, root, Op.SUM)
                what = f"gather {algorithm} root={root} {dtype} {shape} rank {rank}"
                got = pyar.collective("gather", x, root=root, algorithm=algorithm)
                ok = got is None if want is None else (
                    got.shape == want.shape and got.dtype == want.dtype
                    and got.tobytes() == want.tobytes())
                agree(comm, ok, f"{what}: {got} vs {want}")
                out = np.full((size, *shape), 7, x.dtype)
                got = pyar.collective("gather", x, out, root=root, algorithm=algorithm)
                agree(comm, (got is None) if want is None else
                      (got is out and np.array_equal(out, want)), f"{what}: into out")
                request = pyar.collective("gather", x, root=root, algorithm=algorithm,
                                          nonblocking=True)
                got = request.wait()
                agree(comm, (got is None) if want is None else np.array_equal(got, want),
                      f"{what}: nonblocking")


def test_gather_in_the_bench(comm):
    """Its MPI call, its algorithm and auto, each checked against the library's result."""
    text = io.StringIO()
    report = pyar.cli.bench.run(collective="gather", minbytes="8", maxbytes="4K", stepfactor=8,
                            iters=2, warmup=1, algos="linear,auto", file=text, comm=comm)
    rows = report["rows"]
    agree(comm, report["summary"]["wrong"] == 0, text.getvalue())
    agree(comm, [r["algorithm"] for r in rows] == ["mpi", "linear", "auto"] * 4, str(rows))
    agree(comm, all(r["in_place"] is None and r["out_of_place"]["wrong"] == 0 for r in rows))
    agree(comm, all(r["chosen"] == "linear" for r in rows if r["algorithm"] == "auto"))
    agree(comm, report["config"]["baseline"] == "comm.Gather" and report["config"]["root"] == 0)
