"""Running commands under mpiexec from the pure test suite, always under a timeout."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def mpiexec() -> str:
    """``$MPIEXEC``, else the one installed beside this Python (the mpich wheel), else PATH's."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = os.environ.get("MPIEXEC") or (str(beside) if beside.exists() else
                                          shutil.which("mpiexec"))
    if not found:
        raise RuntimeError("no mpiexec: install the project (pip install -e .) or set MPIEXEC")
    return found


def run(nprocs: int, *args: str, timeout: int = 300, env=None) -> subprocess.CompletedProcess:
    """``mpiexec -n nprocs python -m mpi4py ARGS`` in the repository root, bounded by ``timeout``."""
    command = ["timeout", "-k", "10", str(timeout), mpiexec(), "-n", str(nprocs),
               sys.executable, "-m", "mpi4py", *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout + 30, env={**os.environ, **(env or {})})


def explain(proc: subprocess.CompletedProcess) -> str:
    return (f"exit {proc.returncode}\n--- stdout (tail) ---\n{proc.stdout[-6000:]}"
            f"\n--- stderr (tail) ---\n{proc.stderr[-4000:]}")
