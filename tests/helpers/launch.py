"""Running commands under mpiexec from the pure test suite, always under a timeout."""

import os
import re
import subprocess
import sys
from pathlib import Path

from pyar.runtime import launch

ROOT = Path(__file__).resolve().parents[2]


# More ranks than cores: MPICH's own waits (the tests' reference collectives and agree())
# spin on sched_yield and take the cores of the ranks they wait for; its heavy yield sleeps
# instead. tests/mpi at 8 ranks on 2 cores, half the sweeps, on a noisy machine: 85, 95 and
# 106 s without, 77, 77, 88, 90 and 91 s with. (Open MPI's like setting,
# threads_pthreads_yield_strategy=nanosleep: 55 s without, 78 s with, one run each.)
SHARED_CORES = {"MPIR_CVAR_ENABLE_HEAVY_YIELD": "1"}

# With this, MPICH ends a rank whose internal assertion fails through libc abort() (not
# exit()), so the faulthandler pytest enables prints every thread's Python stack: which pyar
# call it was in. (So does mpi4py's MPI_Abort of a rank that failed a test: exit 6, not 1.
# No core file is written: run() sets the ranks' limit on its size to 0.)
FATAL_STACKS = {"MPIR_CVAR_COREDUMP_ON_ABORT": "1"}


def run(nprocs: int, *args: str, timeout: int = 300, env=None) -> subprocess.CompletedProcess:
    """``mpiexec -n nprocs python -m mpi4py ARGS`` in the repository root, bounded by
    ``timeout``, with what that mpiexec needs here (:func:`pyar.runtime.launch.launch_settings`;
    :data:`SHARED_CORES` where ranks outnumber cores)."""
    shared = SHARED_CORES if nprocs > len(os.sched_getaffinity(0)) else {}
    command, environ = launch.mpiexec_command(
        launch.find_mpiexec(), nprocs, sys.executable, "-m", "mpi4py", *args,
        environ={**shared, **os.environ, **(env or {})})
    return subprocess.run(["sh", "-c", 'ulimit -c 0 && exec "$@"', "sh",
                           "timeout", "-k", "10", str(timeout), *command], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout + 30, env=environ)


def explain(proc: subprocess.CompletedProcess) -> str:
    """A failed run's exit status, its first failure's report (pytest's, if any: under
    mpiexec one failure can fail every later test, so the tail alone hides the cause), every
    rank's line for each failed test (which rank's check failed, and its message: the report
    shows one rank's, often "fine here, failed on another rank"), a rank's crash (the MPI
    library's assertion or a fatal signal, with the Python stacks) and the tails of its
    output."""
    first = proc.stdout.find("= FAILURES =")
    head = "" if first < 0 else \
        f"--- stdout (first failure) ---\n{proc.stdout[first:first + 6000]}\n"
    lines = re.findall(r"^.*?(FAILED \S+ - AssertionError: rank \d+: (?!fine here).*)$",
                       proc.stdout, re.M)
    failed = "" if not lines else \
        "--- failed checks, every rank ---\n" + "\n".join(dict.fromkeys(lines))[:6000] + "\n"
    fatal = re.search(r"^.*(Assertion failed|Fatal Python error: (?!Aborted))", proc.stderr,
                      re.M)
    if fatal:       # a rank's crash: the MPI library's backtrace and the Python stacks after it
        failed += f"--- stderr (first crash) ---\n{proc.stderr[fatal.start():][:8000]}\n"
    return (f"exit {proc.returncode}\n{head}{failed}--- stdout (tail) ---\n{proc.stdout[-6000:]}"
            f"\n--- stderr (tail) ---\n{proc.stderr[-4000:]}")
