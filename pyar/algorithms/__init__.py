"""The algorithm registry: one module per algorithm, each a pure schedule builder.

A builder is ``builder(rank, size, count, topology=None) -> list[Step]``. It
never touches MPI; :mod:`pyar.executors` runs what it returns.
"""

from __future__ import annotations

from ..schedule import Builder

COLLECTIVES = ("allreduce", "reduce_scatter", "allgather", "reduce", "bcast", "alltoall",
               "barrier")
LIBRARY = "mpi"      # delegates to the MPI library's own collective: the baseline
AUTO = "auto"        # the tuner's choice

_registry: dict[str, dict[str, Builder]] = {c: {} for c in COLLECTIVES}
generation = [0]     # bumped by every registration: caches keyed by name can tell they are stale


def _check_collective(collective: str) -> dict[str, Builder]:
    """The algorithms of ``collective``: a table made on first use for one registered with
    ``register_collective``."""
    try:
        return _registry[collective]
    except (KeyError, TypeError):
        pass
    from .. import collectives      # lazily: the records import the executors, which import us
    if collective in collectives.names():
        return _registry.setdefault(collective, {})
    raise ValueError(f"collective must be one of {collectives.names()}, got {collective!r}")


def register_algorithm(name: str, collective: str = "allreduce"):
    """Decorator: register ``builder(rank, size, count, topology=None) -> list[Step]`` as ``name``.

    Afterwards ``name`` works everywhere an algorithm is named. Registering a
    name again replaces the builder.
    """
    table = _check_collective(collective)
    if not isinstance(name, str) or not name.isidentifier() or name in (LIBRARY, AUTO):
        raise ValueError(f"algorithm name must be an identifier other than {LIBRARY!r} and "
                         f"{AUTO!r}, got {name!r}")

    def register(builder: Builder) -> Builder:
        if not callable(builder):
            raise TypeError(f"register_algorithm needs a callable builder, got {builder!r}")
        table[name] = builder
        generation[0] += 1
        return builder

    return register


def algorithms(collective: str = "allreduce") -> list[str]:
    """Names of the registered algorithms of ``collective``, ``mpi`` included."""
    return sorted(_check_collective(collective)) + [LIBRARY]


def builder(name: str, collective: str = "allreduce") -> Builder:
    """The builder registered as ``name``; ValueError listing the registered ones otherwise."""
    table = _check_collective(collective)
    try:
        return table[name]
    except (KeyError, TypeError):
        pass
    if name == LIBRARY:
        raise ValueError(f"{LIBRARY!r} delegates to the MPI library and has no schedule")
    raise ValueError(f"unknown {collective} algorithm {name!r}; registered: "
                     f"{', '.join(algorithms(collective))} (or {AUTO!r})")


def check_name(name: str, collective: str = "allreduce") -> str:
    """``name`` if it names a registered algorithm or ``mpi``; ValueError listing them otherwise."""
    if name != LIBRARY:
        builder(name, collective)
    return name


# The built-in algorithms register themselves on import.
from . import (binomial, bruck, dissemination, double_binary_tree, hierarchical,  # noqa: E402,F401
               linear, naive, pairwise, rabenseifner, recursive_doubling, recursive_halving,
               reduce_scatter_gather, ring, scatter_allgather, segmented_ring)
