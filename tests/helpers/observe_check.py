"""Run under mpiexec -n 2 (tests/unit/test_log.py, test_recorder.py, test_trace.py) with PYAR_DEBUG,
PYAR_DEBUG_FILE, PYAR_TRACE and PYAR_DUMP_DIR set by the test: a few calls of known
arguments, then pyar.dump() and a SIGUSR1 dump; the tests read the files it leaves. Prints
on rank 0 one JSON line: what the run saw of the hook."""

import json
import os
import signal
import sys

import numpy as np
from mpi4py import MPI

import pyar
from pyar.runtime import recorder
from pyar.runtime import progress

world = MPI.COMM_WORLD
x = (world.rank + 1) * 1000 + np.arange(16, dtype=np.float32)
pyar.allreduce(x)                                   # auto
pyar.allreduce(x, algorithm="ring")                 # explicit
pyar.allreduce(x, op="max", algorithm="ring")
y = np.arange(4, dtype=np.int64) + world.rank
pyar.bcast(y, root=1)
request = pyar.iallreduce(x)
request.wait()
folder = os.environ["PYAR_DUMP_DIR"]
first = pyar.dump()
os.replace(first, os.path.join(folder, f"explicit{world.rank}.json"))
os.kill(os.getpid(), signal.SIGUSR1)                # handled at the next bytecode
sys.stdout.flush()
if world.rank == 0:
    print(json.dumps({"hook": progress.hook is not None, "last": str(recorder.last_dump())}))
