"""The algorithm registry: one module per algorithm, each a pure schedule builder.

A builder is ``builder(rank, size, count, topology=None) -> list[Step]``. It
never touches MPI; :mod:`pyar.runtime` runs what it returns. Each module
registers its builders with :func:`register_algorithm`, as a user does, with
their closed-form costs (built from :mod:`._terms`).

Parameters: a builder's keyword-only arguments with defaults are the
algorithm's parameters, named as ``name:key=value[,key=value]`` (e.g.
``segmented_ring:segment=4096``) wherever an algorithm is named. This module
alone reads that syntax (:func:`algorithm`); everywhere else the whole
string is the name (cache keys, the signatures ranks compare). A value that
looks like an int is one; the bare name runs the defaults. A closed-form
cost that takes the same keywords is given them; one that does not leaves
the parameterized algorithm to be costed from its schedule.
"""

from __future__ import annotations

import functools
import inspect
import re
import sys
from typing import Callable, NamedTuple

from .. import collectives
from ..core.schedule import Builder
from ._terms import Terms

LIBRARY = "mpi"      # delegates to the MPI library's own collective: the baseline
AUTO = "auto"        # the tuner's choice

Cost = Callable[[int, int, float, object], Terms]   # (size, count, nbytes, topology) -> Terms


class Algorithm(NamedTuple):
    """A registered algorithm: what :func:`register_algorithm` was given."""

    name: str
    collective: str
    builder: Builder
    cost: Cost | None = None        # closed form; None: pyar.model.cost predicts from the schedule
    topology_aware: bool = False    # uses the topology: on one node it is another algorithm
    auto: bool = False              # the auto tuner chooses from it
    exact: bool = True              # its closed form equals pyar.model.cost.predict of its schedule

    @property
    def doc(self) -> str | None:
        """Its description and picture: the builder's docstring, else its module's."""
        made = self.builder
        while isinstance(made, functools.partial):
            made = made.func
        module = sys.modules.get(getattr(made, "__module__", None))
        return made.__doc__ or getattr(module, "__doc__", None)


_registry: dict[str, dict[str, Algorithm]] = {}    # collective -> name -> its record
generation = [0]     # bumped by every registration: caches keyed by name can tell they are stale


def _check_collective(collective: str) -> dict[str, Algorithm]:
    """The algorithms of ``collective`` (a name :mod:`pyar.collectives` has a record of);
    ValueError listing the collectives otherwise."""
    table = _registry.get(collective)
    if table is None:
        collectives.collective(collective)      # ValueError naming the collectives
        table = _registry[collective] = {}
    return table


def register_algorithm(name: str, collective: str = "allreduce", *, cost: Cost | None = None,
                       topology_aware: bool = False, auto: bool = False, exact: bool = True):
    """Decorator: register ``builder(rank, size, count, topology=None) -> list[Step]`` as ``name``.

    Afterwards ``name`` works everywhere an algorithm is named. ``cost`` is
    its closed form, ``cost(size, count, nbytes, topology) -> pyar.model.cost.Terms``
    for ``size > 1`` and ``count > 0`` (``exact=False``: an estimate, not
    equal to the schedule's); without one :mod:`pyar.model.cost` costs the
    schedule itself. ``topology_aware``: ``auto`` considers it only on
    several nodes. ``auto``: the ``auto`` tuner chooses from it (with its
    defaults; a parameterized name never is a candidate). Registering a name
    again replaces the algorithm. The builder's keyword-only arguments with
    defaults are its parameters (``name:key=value``); it checks their values
    first, before its degenerate cases, so that a one-rank build rejects a
    bad one where the name is resolved.
    """
    table = _check_collective(collective)
    if not isinstance(name, str) or not name.isidentifier() or name in (LIBRARY, AUTO):
        raise ValueError(f"algorithm name must be an identifier other than {LIBRARY!r} and "
                         f"{AUTO!r}, got {name!r}")
    if cost is not None and not callable(cost):
        raise TypeError(f"register_algorithm needs a callable cost or None, got {cost!r}")

    def register(builder: Builder) -> Builder:
        if not callable(builder):
            raise TypeError(f"register_algorithm needs a callable builder, got {builder!r}")
        table[name] = Algorithm(name, collective, builder, cost, topology_aware, auto, exact)
        generation[0] += 1
        return builder

    return register


def algorithms(collective: str = "allreduce") -> list[str]:
    """Names of the registered algorithms of ``collective``, ``mpi`` included."""
    return sorted(_check_collective(collective)) + [LIBRARY]


def parameters(builder: Builder) -> dict:
    """``{key: default}``: the builder's keyword-only arguments with defaults."""
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in signature.parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.default is not p.empty}


_INT = re.compile(r"[+-]?\d+\Z")
_derived: dict = {}     # (collective, name, generation) -> the parameterized record


def _parameterized(base: Algorithm, name: str, text: str) -> Algorithm:
    """The record of ``base`` run with the parameters ``text`` (``key=value,...``)."""
    known = parameters(base.builder)
    listed = ", ".join(f"{k}={v!r}" for k, v in known.items())

    def wrong(why):
        return ValueError(f"{base.collective} algorithm {name!r}: {why}; "
                          + (f"{base.name!r} takes {listed} (as "
                             f"{base.name}:key=value[,key=value])" if known
                             else f"{base.name!r} takes no parameters"))
    if not known:
        raise wrong("parameters given")
    given = {}
    for item in text.split(","):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key or not value:
            raise wrong(f"{item!r} is not key=value")
        if key not in known:
            raise wrong(f"unknown parameter {key!r}")
        if key in given:
            raise wrong(f"parameter {key!r} given twice")
        default = known[key]
        if _INT.match(value):
            value = int(value)
        if isinstance(default, int) and not isinstance(value, int):
            raise wrong(f"{key} must be an int, got {value!r}")
        given[key] = value
    made = functools.partial(base.builder, **given)
    for form in ("table", "waves"):                  # (its all-ranks forms, if it has them)
        bulk = getattr(base.builder, form, None)
        if bulk is not None:
            setattr(made, form, functools.partial(bulk, **given))
    try:
        made(0, 1, 0)       # a pure builder checks its parameters before anything else
    except (ValueError, TypeError) as e:
        raise wrong(str(e)) from None
    cost = base.cost
    if cost is not None:
        cost = (functools.partial(cost, **given) if set(given) <= set(parameters(cost))
                else None)
    return base._replace(name=name, builder=made, cost=cost, auto=False)


def algorithm(name: str, collective: str = "allreduce") -> Algorithm:
    """The record registered as ``name`` (``base:key=value,...``: ``base`` with those
    parameters, see the module docstring); ValueError listing the registered ones otherwise."""
    table = _check_collective(collective)
    try:
        return table[name]
    except (KeyError, TypeError):
        pass
    if isinstance(name, str) and ":" in name:
        key = (collective, name, generation[0])
        found = _derived.get(key)
        if found is None:
            base, _, text = name.partition(":")
            if base not in table:
                raise ValueError(f"unknown {collective} algorithm {base!r} in {name!r}; "
                                 f"registered: {', '.join(algorithms(collective))}")
            found = _parameterized(table[base], name, text)
            if len(_derived) >= 1024:
                _derived.clear()
            _derived[key] = found
        return found
    if name == LIBRARY:
        raise ValueError(f"{LIBRARY!r} delegates to the MPI library and has no schedule")
    raise ValueError(f"unknown {collective} algorithm {name!r}; registered: "
                     f"{', '.join(algorithms(collective))} (or {AUTO!r})")


def builder(name: str, collective: str = "allreduce") -> Builder:
    """The builder registered as ``name``; ValueError listing the registered ones otherwise."""
    return algorithm(name, collective).builder


def split_names(text: str) -> list[str]:
    """The names of a comma list, parameters kept with their name: a ``key=value`` item
    without ``:`` continues the parameterized name before it (``pat:a=1,b=2,ring``)."""
    names = []
    for part in filter(None, (part.strip() for part in str(text).split(","))):
        if names and "=" in part and ":" not in part and ":" in names[-1]:
            names[-1] += "," + part
        else:
            names.append(part)
    return names


def check_name(name: str, collective: str = "allreduce") -> str:
    """``name`` if it names a registered algorithm or ``mpi``; ValueError listing them otherwise."""
    if name != LIBRARY:
        algorithm(name, collective)
    return name


# The built-in algorithms register themselves on import.
from . import (bine_butterfly, bine_tree, binomial, bruck, dissemination,  # noqa: E402,F401
               double_binary_tree, hierarchical, knomial, linear, naive, one_shot, pairwise, pat,
               rabenseifner, recexch, recursive_doubling, recursive_halving,
               reduce_scatter_gather, ring, scatter_allgather, segmented_ring, swing_bandwidth,
               swing_latency, two_shot)
