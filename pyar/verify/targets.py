"""The named targets of ``pyar verify`` beyond a ``module:function``: the MPI library's
allreduce with one of its own algorithms forced, ``mpi:ALGO``, and a torch.distributed
backend, ``torch:BACKEND``; and what ``pyar verify --list-targets`` prints.

No MPI here (the driver's side): the MPI library is told by its mpiexec's ``--version``
(:func:`pyar.runtime.launch.launcher_family`), which starts no job.

``mpi:ALGO`` forces ALGO by the library's own settings, set in the job's environment before
MPI_Init (a job per distinct setting):

- MPICH: ``MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=ALGO`` (its names, :data:`MPICH_ALGORITHMS`,
  as MPICH 5.0's ``mpivars`` lists them, less ``auto``, which is ``mpi``, and ``ccl``,
  which needs a CCL library). Where a forced algorithm does not apply to a call (e.g.
  recursive doubling or ring on a non-commutative op, none of which the sweep has), MPICH
  falls back to its own choice: ``MPIR_CVAR_COLLECTIVE_FALLBACK=error`` would say so, but
  it also fails MPI_Init itself for ``reduce_scatter_allgather`` (MPI_Init's own allreduce
  is one such call), so the default, silent, stays.
- Open MPI: ``OMPI_MCA_coll_tuned_use_dynamic_rules=1`` and
  ``OMPI_MCA_coll_tuned_allreduce_algorithm=N`` (:data:`OPENMPI_ALGORITHMS`, Open MPI
  5.0's numbering, 1-6, as its ``ompi_info --param coll tuned --level 9`` lists them;
  later versions add ``allgather_reduce``, 7, which 5.0 refuses and runs its own choice
  instead), which applies where Open MPI's tuned component serves the communicator.

Every rank checks that its setting arrived: the variable in its environment, and where the
library's MPI_T reads it (MPICH's control variable, Open MPI's
``coll_tuned_allreduce_algorithm``), the value MPI_Init parsed
(:func:`pyar.verify.worker.forced_here`).
"""

from __future__ import annotations

import shlex

from ..algorithms import LIBRARY, algorithms
from ..runtime.launch import find_mpiexec, launcher_family

MPICH_VARIABLE = "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM"
# MPICH 5.0's values of MPICH_VARIABLE, in its enum's order (MPI_T reads the index)
MPICH_ENUM = ("auto", "nb", "smp", "recursive_doubling", "recursive_multiplying",
              "reduce_scatter_allgather", "tree", "recexch", "ring",
              "k_reduce_scatter_allgather", "ccl")
MPICH_ALGORITHMS = tuple(a for a in MPICH_ENUM if a not in ("auto", "ccl"))
OPENMPI_VARIABLE = "OMPI_MCA_coll_tuned_allreduce_algorithm"
OPENMPI_ALGORITHMS = {"basic_linear": 1, "nonoverlapping": 2, "recursive_doubling": 3,
                      "ring": 4, "segmented_ring": 5, "rabenseifner": 6}
TORCH_BACKENDS = ("gloo", "mpi", "pyar", "nccl")
LIBRARIES = {"mpich": "MPICH", "openmpi": "Open MPI"}


def library_family(mpiexec: str | None = None) -> str:
    """The MPI library's family (``mpich``, ``openmpi``, ...; ``unknown``) by ``mpiexec``'s
    ``--version``, the default one (:func:`pyar.runtime.launch.find_mpiexec`) if None."""
    try:
        return launcher_family(shlex.split(mpiexec or find_mpiexec())[0])
    except RuntimeError:
        return "unknown"


def mpi_algorithms(family: str) -> list[str]:
    """The ALGO names of ``mpi:ALGO`` under the library ``family``; [] if pyar knows none."""
    if family == "mpich":
        return list(MPICH_ALGORITHMS)
    if family == "openmpi":
        return list(OPENMPI_ALGORITHMS)
    return []


def setting(spec: str, family: str) -> dict:
    """The environment variables a job of target ``spec`` needs under library ``family``
    ({} for a target that needs none); ValueError for an ``mpi:ALGO`` of an unknown ALGO
    or library, or a ``torch:BACKEND`` of an unknown BACKEND, naming the valid ones."""
    kind, _, name = spec.partition(":")
    if kind == "torch":
        if name not in TORCH_BACKENDS:
            raise ValueError(f"target {spec!r}: expected torch:BACKEND, BACKEND one of "
                             f"{', '.join(TORCH_BACKENDS)}")
        return {}
    if kind != "mpi" or not name:
        return {}
    names = mpi_algorithms(family)
    if not names:
        raise ValueError(f"target {spec!r}: pyar forces algorithms of MPICH and Open MPI only; "
                         f"this MPI library is {family!r} (by its mpiexec --version): use "
                         f"mpi, its own choice")
    if name not in names:
        raise ValueError(f"target {spec!r}: {LIBRARIES[family]} has no allreduce algorithm "
                         f"{name!r}; expected one of: {', '.join(names)}")
    if family == "mpich":
        return {MPICH_VARIABLE: name}
    return {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            OPENMPI_VARIABLE: str(OPENMPI_ALGORITHMS[name])}


def uses_pyar(spec: str) -> bool:
    """Whether target ``spec`` may run pyar (and follow its settings, e.g.
    ``PYAR_REPRODUCIBLE``): all but the MPI library's and torch's own backends."""
    kind, _, name = spec.partition(":")
    return not (kind == "mpi" or (kind == "torch" and name != "pyar"))


def own_job(spec: str) -> bool:
    """Whether target ``spec`` needs MPI jobs of its own: ``mpi:ALGO`` (its setting is read
    at MPI_Init) and ``torch:BACKEND`` (one process group a job)."""
    kind, _, name = spec.partition(":")
    return kind == "torch" or (kind == "mpi" and bool(name))


def listing(family: str, collective: str = "allreduce") -> str:
    """What ``pyar verify --list-targets`` prints: every named target of ``collective``
    under the library ``family``."""
    names = [n for n in algorithms(collective) if n != LIBRARY]
    library = LIBRARIES.get(family, family)
    lines = [f"# MPI library: {library} (by its mpiexec --version)",
             "mpi                       the library's own MPI_" + {
                 "allreduce": "Allreduce", "reduce_scatter": "Reduce_scatter(_block)",
                 "allgather": "Allgather"}[collective] + ", its own choice of algorithm"]
    if collective == "allreduce":
        algos = mpi_algorithms(family)
        how = {"mpich": f"{MPICH_VARIABLE}=ALGO",
               "openmpi": "OMPI_MCA_coll_tuned_use_dynamic_rules=1 "
                          f"{OPENMPI_VARIABLE}=N"}.get(family)
        if algos:
            lines.append(f"# mpi:ALGO: MPI_Allreduce with ALGO forced by {how} "
                         f"(mpi:all: every one)")
            lines += [f"mpi:{a}" for a in algos]
        else:
            lines.append(f"# mpi:ALGO: none (pyar forces MPICH's and Open MPI's algorithms, "
                         f"not {library}'s)")
        lines.append("# torch:BACKEND: dist.all_reduce of a process group of the job's ranks "
                     "(nccl: on a GPU)")
        lines += [f"torch:{b}" for b in TORCH_BACKENDS]
    lines.append("# pyar:ALGO: pyar's own (pyar:all: every one)")
    lines += ["pyar:auto", *(f"pyar:{n}" for n in names)]
    return "\n".join(lines)
