"""The MPI tests (tests/mpi) at every rank count of the matrix, each run under a timeout;
two runs emulate several nodes on this machine with PYAR_RANKS_PER_NODE, two give small
plans' messages less shared memory (PYAR_SHM_BYTES): none, or enough for a few plans.

Each run says, past pytest's capture, which rank count and setting it is running and how
long it took (and the tests/mpi tally), so `make test` shows where it is. Each run draws
PYAR_TEST_EXAMPLES (here PYAR_MATRIX_EXAMPLES, default 25) hypothesis examples per property,
instead of the 150 a single `make test-mpi` run draws, from a seed of its own (its id, e.g.
``--hypothesis-seed=np8-rpn3``: what reproduces a failure): the runs draw different examples.

Two runs share each of 3, 5 and 8 ranks (PYAR_TEST_SHARD, tests/mpi/conftest.py): at 3
ranks they split the sweeps (tests marked ``sweep``, enumerated cases) and both run every
other test, flat with mailboxes and with none; at 5 and 8 ranks they split every test, flat
and on emulated nodes, in opposite halves at the two rank counts, so that each test runs at
5 and 8 ranks once flat and once on emulated nodes (the 8-rank runs are the matrix's
longest). Each sweep case runs at every rank count.

``make test`` runs the runs not marked ``full`` (1, 2 and 3 ranks and emulated nodes at 5:
what catches a wrong schedule, a wrong pairwise or hierarchical path, in a few minutes);
``make test-all``, which CI runs, adds the rest.
(CI's second matrix, under Open MPI, draws fewer examples: it checks another library under
the same schedules, which the first matrix's examples check already.)"""

import os
import re
import subprocess
import sys
import time

import pytest

from launch import FATAL_STACKS, ROOT, explain, run

EXAMPLES = os.environ.get("PYAR_MATRIX_EXAMPLES", "25")


def describe(nprocs, ranks_per_node, shm_bytes, shard, cma=None) -> str:
    words = [f"{nprocs} rank{'s' if nprocs > 1 else ''}"]
    if ranks_per_node:
        words.append(f"PYAR_RANKS_PER_NODE={ranks_per_node}")
    if cma:
        words.append(f"PYAR_CMA={cma}")
    if shm_bytes is not None:
        words.append(f"PYAR_SHM_BYTES={shm_bytes}")
    if shard:
        words.append(f"PYAR_TEST_SHARD={shard}")
    return ", ".join(words)


def case(nprocs, ranks_per_node=None, shm_bytes=None, shard=None, cma=None, full=False):
    """A run of the matrix, its id e.g. ``np5-rpn2`` or ``np3-shm0``; ``shard``: the part of
    tests/mpi it runs (PYAR_TEST_SHARD), None for all; ``cma``: PYAR_CMA; ``full``: marked
    ``full``, run by ``make test-all`` only."""
    tail = (f"-rpn{ranks_per_node}" if ranks_per_node else "") + \
        ("" if shm_bytes is None else f"-shm{shm_bytes}") + (f"-cma{cma}" if cma else "")
    return pytest.param(nprocs, ranks_per_node, shm_bytes, shard, cma, id=f"np{nprocs}{tail}",
                        marks=[pytest.mark.full] if full else [])


@pytest.mark.parametrize("nprocs,ranks_per_node,shm_bytes,shard,cma", [
    # make test's tier: one rank (the degenerate cases), two (every pairwise path), three
    # (odd counts, non-powers of two: half the sweeps, every other test), and emulated nodes
    # of unequal size (2+2+1: the hierarchical paths) with every large plan's messages read
    # from the senders' memory (PYAR_CMA=1; by default only from 4 MiB buffers)
    case(1), case(2), case(3, shard="0/2"), case(5, 2, shard="1/2:all", cma="1"),
    # make test-all adds: the other halves at 3, 5 and 8 ranks, flat and on nodes of 3+3+2,
    # so that each test runs at 5 and 8 ranks once flat and once on emulated nodes, and
    # with PYAR_CMA=1 once
    case(5, shard="0/2:all", cma="1", full=True), case(8, shard="1/2:all", full=True),
    case(8, 3, shard="0/2:all", full=True),
    case(3, shm_bytes="0", shard="1/2", full=True),  # no shared-memory mailboxes: small
                                                     # plans on MPI
    case(4, shm_bytes="20000", full=True)])  # mailboxes for the first plans only, then MPI
                                    # (the run at 4 ranks: all mailboxes is the others' setting)
def test_mpi_suite(nprocs, ranks_per_node, shm_bytes, shard, cma, capsys, request):
    env = {"PYAR_TEST_EXAMPLES": EXAMPLES, **FATAL_STACKS}
    if cma:
        env["PYAR_CMA"] = cma
    if shard:
        env["PYAR_TEST_SHARD"] = shard
    if ranks_per_node:
        env["PYAR_RANKS_PER_NODE"] = str(ranks_per_node)
    if shm_bytes is not None:
        env["PYAR_SHM_BYTES"] = shm_bytes
    what, seed = describe(nprocs, ranks_per_node, shm_bytes, shard, cma), request.node.callspec.id
    with capsys.disabled():
        print(f"\n[MPI matrix] tests/mpi on {what} (--hypothesis-seed={seed}) ...", flush=True)
    start = time.monotonic()
    proc = run(nprocs, "-m", "pytest", "tests/mpi", "-q", "--capture=sys", "-p",
               "no:cacheprovider", "--color=no", "--timeout=240", "--timeout-method=thread",
               f"--hypothesis-seed={seed}", timeout=400, env=env)
    tally = re.findall(r"^=*\s*(\d+ passed.*?) in [\d.]+s", proc.stdout, re.M)
    with capsys.disabled():
        print(f"[MPI matrix] {what}: {'ok' if proc.returncode == 0 else 'FAILED'} in "
              f"{time.monotonic() - start:.0f} s ({tally[0] if tally else 'no tally'})",
              flush=True)
    assert proc.returncode == 0, explain(proc)
    assert " passed" in proc.stdout and " failed" not in proc.stdout, explain(proc)


def collected(shard=None) -> subprocess.CompletedProcess:
    """pytest collecting tests/mpi (one process, no mpiexec) with PYAR_TEST_SHARD=shard."""
    env = {k: v for k, v in os.environ.items() if k != "PYAR_TEST_SHARD"}
    if shard is not None:
        env["PYAR_TEST_SHARD"] = shard
    return subprocess.run([sys.executable, "-m", "pytest", "tests/mpi", "--collect-only", "-q",
                           "-p", "no:cacheprovider"], capture_output=True, text=True,
                          timeout=120, env=env, cwd=ROOT)


def ids(proc) -> set:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {line for line in proc.stdout.splitlines() if "::" in line}


def test_the_two_halves_hold_each_sweep_case_once_and_every_other_test_or_half_of_them():
    every, first, second = (ids(collected(shard)) for shard in (None, "0/2", "1/2"))
    both = first & second                  # the tests that are not sweeps
    sweeps = every - both
    assert first | second == every and any("test_layout[" in t for t in sweeps)
    assert abs(len(first - both) - len(second - both)) <= len(sweeps) // 10
    split = [{t.partition("[")[0] for t in half - both} for half in (first, second)]
    assert split[0] == split[1], "a sweep went wholly into one half"
    halves = [ids(collected(f"{i}/2:all")) for i in (0, 1)]
    assert halves[0] | halves[1] == every and not halves[0] & halves[1]
    assert halves[0] & sweeps == first - both      # the sweeps split as without :all
    others = [len(half - sweeps) for half in halves]
    assert abs(others[0] - others[1]) <= 1, others
    for wrong in (collected("2/2"), collected("0/2:some")):
        assert wrong.returncode != 0 and "expected i/n" in wrong.stdout + wrong.stderr
