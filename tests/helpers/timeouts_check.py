"""Run under mpiexec (tests/unit/test_timeouts.py): the last rank skips a call, or sleeps past the
timeout, and every other rank must get pyar.TimeoutError within the timeout + 2 s, naming
the call's number, the step and the peer; on every path. Prints one JSON line per rank and
scenario (on rank 0): {"scenario", "rank", "error", "message", "seconds"}."""

import json
import sys
import time
from pathlib import Path

import numpy as np
from mpi4py import MPI

import pyar

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_cupy  # noqa: E402

TIMEOUT = 1.0
world = MPI.COMM_WORLD
last = world.size - 1
env_timeout = "PYAR_TIMEOUT" in __import__("os").environ


def array(kind, n):
    host = np.arange(n, dtype=np.float32) + world.rank
    return fake_cupy.asarray(host) if kind == "device" else host


def scenario(name, kind, n, warm, sleeper):
    comm = pyar.Comm(world)
    x = array(kind, n)
    if warm:                            # (a first call sets up mailboxes, loads kernels)
        pyar.allreduce(x, comm=comm, algorithm="recursive_doubling", timeout=120)
    kwargs = {} if env_timeout else {"timeout": TIMEOUT}
    error, message, began = None, "", time.monotonic()
    if world.rank != last or sleeper:
        if sleeper and world.rank == last:
            time.sleep(TIMEOUT + 1.5)
            began = time.monotonic()
        try:
            pyar.allreduce(x, comm=comm, algorithm="recursive_doubling", **kwargs)
        except Exception as e:          # reported, then judged by the test
            error, message = type(e).__name__, str(e)
    row = {"scenario": name, "rank": world.rank, "error": error, "message": message,
           "seconds": time.monotonic() - began}
    rows = world.gather(row)                # one printer: lines of several ranks never mix
    if world.rank == 0:
        for row in rows:
            print(json.dumps(row), flush=True)


fake_cupy.install()
for warm_up in (np.ones(4, np.float32), np.ones(1 << 18, np.float32)):    # kernels loaded
    pyar.allreduce(warm_up, algorithm="recursive_doubling", timeout=120)
for name, kind, n, warm, sleeper in [
        ("mailbox", "host", 4, True, False),            # a small plan: shared-memory mailboxes
        ("large", "host", 1 << 20, True, False),        # the general path: Isend/Irecv
        ("first call", "host", 1000, False, False),     # the agreement of a plan's first call
        ("staged device", "device", 1 << 18, True, False),
        ("sleeper", "host", 4, True, True)]:
    scenario(name, kind, n, warm, sleeper)
