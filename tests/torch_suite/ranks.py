"""One rank of torch's own distributed suite (``DistributedTest._DistTestBase``) under mpiexec:
every rank runs the same tests in the same order, with MPI's rank and world size.

Run by :mod:`tests.torch_suite.run` (not by hand)::

    mpiexec -n N python -m mpi4py tests/torch_suite/ranks.py BACKEND TEMP_DIR RESULTS TEST...

torch spawns a process per rank for each test (``MultiProcessTestCase``); here the ranks
are mpiexec's and each test runs in all of them at once, as torch's spawned child does it
(``TestDistBackend._run``): a fresh ``init_process_group`` on a ``file://`` store of its
own with the test's timeout, torch's file barrier, the test method, the barrier, and
``destroy_process_group``. A rank's outcome is ``pass``, ``skip`` (a method marked skipped, as
unittest's runner skips it, ``unittest.SkipTest``, or a ``sys.exit`` with one of torch's
skip codes, as its skip decorators do in a child) or
``fail`` (the traceback's last lines); rank 0 appends the test's line (every rank's
outcome, gathered over MPI with a polling wait) to ``RESULTS`` and, before it, a ``start``
line. A test still running after its deadline ends the job: ``faulthandler`` prints every
thread's stack and exits the rank, mpiexec ends the others, and the driver counts the test
as a failure and starts a new job at the next one. Ranks whose outcomes differ end the job
the same way after writing it (a rank may still hold work of the failed test).

The backend ``pyar`` is added to torch's plugin, ddp and subgroup features before the suite
is imported, so that the DDP and subgroup tests run on it as on gloo.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import sys
import time
import traceback
import unittest
from datetime import timedelta

from mpi4py import MPI

NAME, TEMP_DIR, RESULTS, *TESTS = sys.argv[1:]
BACKEND, _, SUITE = NAME.partition("-as-")      # pyar-as-gloo: pyar, in gloo's selection
SUITE = SUITE or BACKEND
WORLD = MPI.COMM_WORLD
RANK, SIZE = WORLD.Get_rank(), WORLD.Get_size()
DEADLINE = float(os.environ.get("TORCH_SUITE_TIMEOUT", "240"))   # seconds a test may take

os.environ.update(BACKEND=SUITE, WORLD_SIZE=str(SIZE), TEMP_DIR=TEMP_DIR,
                  INIT_METHOD=f"file://{TEMP_DIR}/init_dir/shared_init_file")
if BACKEND == "pyar":
    import pyar.torch  # noqa: F401  (registers the backend)

from torch.testing._internal import common_distributed as cd  # noqa: E402

if SUITE == "pyar":
    for feature in ("plugin", "ddp", "subgroup"):
        cd.DistTestCases.backend_feature[feature].add(SUITE)

import torch.distributed as dist  # noqa: E402
from torch.testing._internal import common_utils  # noqa: E402
from torch.testing._internal.distributed import distributed_test as dt  # noqa: E402

SKIP_CODES = {s.exit_code: s.message for s in cd.TEST_SKIPS.values()}


def _as_backend(make):
    """``make`` (``dist.init_process_group``, ``dist.new_group``) with the suite's backend
    name (``SUITE``) meaning the one run (``BACKEND``)."""
    def made(*args, **kwargs):
        if kwargs.get("backend") == SUITE:
            kwargs["backend"] = BACKEND
        return make(*args, **kwargs)
    return made


if SUITE != BACKEND:
    dist.init_process_group = _as_backend(dist.init_process_group)
    dist.new_group = _as_backend(dist.new_group)


class MPIDistTest(dt.TestDistBackend, dt.DistributedTest._DistTestBase):
    """torch's test class with the process management of mpiexec: ``setUp`` and
    ``tearDown`` make no processes and no temporary directory (the job shares one)."""

    def setUp(self):
        common_utils.TestCase.setUp(self)
        self.rank = RANK
        self.skip_return_code_checks = []

    def tearDown(self):
        common_utils.TestCase.tearDown(self)


def _wait(request) -> None:
    """Complete an MPI request without spinning a core (the ranks share few)."""
    while not request.Test():
        time.sleep(0.005)


def _fresh_dirs(index: int) -> None:
    """Empty the job's barrier and test directories for test ``index`` (rank 0, between MPI
    barriers) and point the suite's re-initializing tests at a file of the test's own."""
    _wait(WORLD.Ibarrier())
    if RANK == 0:
        for sub in ("barrier", "test_dir", "init_dir"):
            shutil.rmtree(os.path.join(TEMP_DIR, sub), ignore_errors=True)
            os.makedirs(os.path.join(TEMP_DIR, sub))
    _wait(WORLD.Ibarrier())
    dt.Barrier.barrier_id = 0
    dt.INIT_METHOD = f"file://{TEMP_DIR}/init_dir/shared_init_file_{index}"
    os.environ["INIT_METHOD"] = dt.INIT_METHOD


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def run_one(name: str, index: int) -> tuple[str, str]:
    """(outcome, detail) of test ``name`` on this rank, run as torch's spawned child runs
    it."""
    method = getattr(MPIDistTest, name)
    if getattr(method, "__unittest_skip__", False):    # (unittest's runner skips these)
        return "skip", getattr(method, "__unittest_skip_why__", "")
    _fresh_dirs(index)
    test = MPIDistTest(name)
    test.file_name = os.path.join(TEMP_DIR, f"store_{index}")
    try:
        test.setUp()
        try:
            seconds = dt.CUSTOM_PG_TIMEOUT.get(name, dt.default_pg_timeout)
            dist.init_process_group(init_method=f"file://{test.file_name}", backend=BACKEND,
                                    world_size=SIZE, rank=RANK,
                                    timeout=timedelta(seconds=seconds))
            test._barrier()
            common_utils.set_rng_seed()
            getattr(test, name)()
            test._barrier()
        finally:
            if dist.is_initialized():
                dist.destroy_process_group()
            test.tearDown()
    except unittest.SkipTest as e:
        return "skip", str(e)
    except SystemExit as e:
        if e.code in SKIP_CODES:
            return "skip", SKIP_CODES[e.code]
        return "fail", f"sys.exit({e.code!r})"
    except BaseException:
        return "fail", _tail(traceback.format_exc())
    return "pass", ""


def _write(line: dict) -> None:
    if RANK == 0:
        with open(RESULTS, "a") as f:
            f.write(json.dumps(line) + "\n")


def main() -> None:
    for index, name in enumerate(TESTS):
        _write({"start": name})
        faulthandler.dump_traceback_later(DEADLINE, exit=True)
        started = time.monotonic()
        outcome = run_one(name, index)
        _wait(WORLD.Ibarrier())     # (every rank done: the allgather after it does not spin)
        every = WORLD.allgather(outcome)
        faulthandler.cancel_dump_traceback_later()
        _write({"test": name, "seconds": round(time.monotonic() - started, 2),
                "ranks": [list(o) for o in every]})
        if len({o[0] for o in every}) > 1:
            sys.stdout.flush()
            os._exit(3)


if __name__ == "__main__":
    main()
