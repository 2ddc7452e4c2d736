"""Choosing the algorithm: an explicit name, else ``PYAR_ALGO``, else the cost model (``auto``).

``PYAR_ALGO`` works like NCCL_ALGO: a bare name (``PYAR_ALGO=ring``) is that
algorithm for every collective that has one of the name and ``auto`` for the
others; ``collective:name`` entries (``allreduce:ring;allgather:bruck``) name
one collective's, and win over a bare name. The whole value is checked at
once, whichever collective is called: a name no collective has, a
collective's name it lacks, or an unknown collective is one ValueError
listing what is valid.

``auto`` picks, per collective, rank count, element count and dtype, the
candidate with the least time predicted by :mod:`pyar.model.cost` under the
machine parameters of the tuning file (``PYAR_TUNING_FILE``, default
``$XDG_CACHE_HOME/pyar/tuning-LIBRARY.json``, e.g.
``~/.cache/pyar/tuning-openmpi-5.0.11.json``: one per MPI library), written by
``pyar tune`` under that library; without one, under :func:`defaults`. A machine
description (``machines/*.json``: the same format, with ``inter_node`` alpha
and beta for messages between nodes) works as a tuning file too: on a
topology of several nodes, candidates are then costed from their schedules,
each message on its own link class; with a ``network`` entry
(:mod:`pyar.model.network`: a torus, fat tree, switch or dragonfly), candidates
are costed from their schedules, every message routed over its links. The file is
read once per process, and every rank must see the same one (ranks that pick
differently get a MismatchError, not a hang).

Candidates are the algorithms registered with ``auto=True`` (every
built-in, and a user's that asks); ``mpi`` is never one (it has no schedule
to cost). A topology-aware one (``hierarchical``) competes only on a
topology of several nodes (on one it is a plain ring), costed on that
topology. One with a closed form (every built-in) is costed by it
(:func:`pyar.model.cost.formula`), never by building a schedule; one without is
costed from its schedule, and left out if that cannot be built here (its
builder raises ValueError or ScheduleError). Choices are memoised, so a hot
loop of one size pays a dict lookup.
"""

from __future__ import annotations

import functools
import json
import math
import os
from pathlib import Path

import numpy as np

from .. import collectives
from ..algorithms import AUTO, LIBRARY, algorithm as registered, algorithms, check_name, generation
from ..core.errors import ScheduleError
from . import cost, network

FORMAT = "pyar-tuning/1"

# The shipped defaults: what `pyar tune` measures (mpiexec -n 2, the MPICH wheel, one node)
# on a 2-core VM, medians of runs, each the lower quartiles of many timed calls. alpha is a
# step of a small plan and delta what a step of the general path adds, as an earlier runtime
# measured them: today's native programs take about 0.1 us a step on 2 ranks with a core
# each, but on 4 ranks of 2 cores (make run) a step waits for a core, and auto chose 1.6-4.6x
# slower algorithms at 2 - 256 KiB under those values. eager is the limit of MPI's own
# messages, rendezvous the cost beyond it; gamma per dtype on 256 KiB arrays, which stay in
# cache; memory the memory terms (pyar.model.cost) by buffer size, medians of three runs.
# Run `pyar tune` on your own machine.
DEFAULTS = cost.Params(
    alpha=2.26e-6, beta=8.54e-11, delta=1.65e-6, eager=8078, rendezvous=2.40e-6,
    resident=cost.RESIDENT_BYTES,   # (the runtime's, not measured)
    gamma={"int8": 3.32e-11, "int16": 3.16e-11, "int32": 3.27e-11, "int64": 3.78e-11,
           "uint8": 3.87e-11, "uint16": 3.78e-11, "uint32": 3.48e-11, "uint64": 3.59e-11,
           "float16": 2.72e-10, "bfloat16": 1.18e-10, "float32": 3.40e-11, "float64": 3.45e-11},
    memory=((1 << 20, 1.86e-10, 8.3e-13, 4.5e-7), (4 << 20, 1.21e-10, 5.18e-11, 3.47e-6),
            (16 << 20, 1.32e-10, 5.89e-11, 1.28e-5), (64 << 20, 1.52e-10, 2.66e-11, 2.19e-6)))

_FLOATS = {2: "float16", 4: "float32", 8: "float64"}     # itemsize -> dtype when none is given
_MEMO_SIZE = 4096           # choices kept before the memo starts afresh
_memo: dict = {}
_params: dict = {}          # tuning file path -> Params


def _has(name: str, collective: str) -> bool:
    """Whether ``collective`` has the algorithm ``name`` (``base:key=value``: its base);
    ValueError if it has the base but not those parameters."""
    if name.partition(":")[0] not in algorithms(collective):
        return False
    check_name(name, collective)
    return True


@functools.lru_cache(maxsize=16)
def _parse_override(text: str, registered_generation: int) -> dict:
    """``{collective or None: name}`` from a PYAR_ALGO value, checked against the registry as
    it was at ``registered_generation``; one ValueError saying all that is wrong. An entry's
    text before its first ``:`` is a collective if one has that name, else the entry is one
    name with parameters (``knomial:k=4``)."""
    table, wrong = {}, []
    for item in filter(None, (part.strip() for part in text.split(";"))):
        collective, sep, name = (part.strip() for part in item.partition(":"))
        if not sep or (collective not in collectives.names() and "=" in name):
            collective, sep, name = "", "", item
        try:
            if not sep:
                if name != AUTO and not any([_has(name, c) for c in collectives.names()]):
                    wrong.append(f"no collective has an algorithm {name!r}")
                table[None] = name
            elif collective not in collectives.names():
                wrong.append(f"unknown collective {collective!r} in {item!r} (collectives: "
                             f"{', '.join(collectives.names())})")
            elif name != AUTO and not _has(name, collective):
                wrong.append(f"unknown {collective} algorithm {name!r}")
            else:
                table[collective] = name
        except ValueError as e:
            wrong.append(str(e))
    if wrong:
        valid = "; ".join(f"{c}: {', '.join(algorithms(c))}" for c in collectives.names())
        raise ValueError(f"PYAR_ALGO={text!r}: {'; '.join(wrong)}. Expected a name (that "
                         f"algorithm where a collective has it, auto elsewhere) or "
                         f"collective:name entries separated by ';', from: {valid} "
                         f"(or {AUTO!r} anywhere; name:key=value,... sets parameters)")
    return table


def forced(text: str, collective: str) -> str | None:
    """The algorithm the PYAR_ALGO value ``text`` names for ``collective``: its own entry,
    else the bare name if ``collective`` has it, else None (auto); ValueError if ``text``
    names anything unknown, whichever collective asks (memoised)."""
    return _forced(text, collective, generation[0])


@functools.lru_cache(maxsize=64)
def _forced(text: str, collective: str, registered_generation: int) -> str | None:
    table = _parse_override(text, registered_generation)
    name = table.get(collective)
    if name is None:
        name = table.get(None)
        if name is not None and name != AUTO and not _has(name, collective):
            return None
    return None if name == AUTO else name


# CPython keeps the environment in ``os.environ._data`` (keys encoded): the hot path reads
# it there, since ``os.environ.get`` of a variable that is not set raises and catches a
# KeyError inside, which costs a microsecond or more (as much as a small MPI exchange).
_DATA, _ENCODE, _DECODE = (getattr(os.environ, a, None)
                           for a in ("_data", "encodekey", "decodevalue"))
_FAST = isinstance(_DATA, dict) and _ENCODE is not None and _DECODE is not None


def _env_reader(name: str):
    """A fast ``os.environ.get(name)`` for the hot path."""
    if not _FAST:
        return lambda: os.environ.get(name)
    get, key, decode = _DATA.get, _ENCODE(name), _DECODE
    return lambda: None if (value := get(key)) is None else decode(value)


_pyar_algo = _env_reader("PYAR_ALGO")
_tuning_file = _env_reader("PYAR_TUNING_FILE")


def _overrides_reader():
    """``overrides()``: a token that changes whenever PYAR_ALGO or PYAR_TUNING_FILE does (their
    raw values), for caches of :func:`select`'s answers; cheaper than reading both."""
    if not _FAST:
        return lambda: (_pyar_algo(), _tuning_file())
    get, algo, tuning = _DATA.get, _ENCODE("PYAR_ALGO"), _ENCODE("PYAR_TUNING_FILE")
    return lambda: (get(algo), get(tuning))


overrides = _overrides_reader()


def select(collective: str, algorithm: str, size: int, count: int, nbytes: int,
           dtype=None, topology=None) -> str:
    """The algorithm to run: ``algorithm`` unless it is ``auto``; ValueError if unknown.

    ``dtype`` sets the reduction cost; None means the float of the element
    size ``nbytes // count``. ``topology`` (the Comm's) lets topology-aware
    algorithms compete when it has several nodes.
    """
    if algorithm != AUTO:
        return check_name(algorithm, collective)
    text = _pyar_algo()
    if text:
        name = forced(text, collective)
        if name is not None:
            return name
    # id(): hashing a Topology hashes all its ranks; the entry keeps the object, so its id
    # cannot be reused while the entry lives. generation: a registration may change the choice
    key = (collective, size, count, nbytes, dtype, _tuning_file(), id(topology), generation[0])
    found = _memo.get(key)
    if found is None:
        if len(_memo) >= _MEMO_SIZE:
            _memo.clear()
        if dtype is None:
            dtype = _FLOATS.get(nbytes // count if count else 4, "float32")
        found = _memo[key] = (choose(collective, size, count, dtype, parameters(), topology),
                              topology)
    return found[0]


def reason(collective: str, algorithm: str, size: int, count: int, dtype="float32",
           topology=None) -> str:
    """Why :func:`select` picks what it does, in words (for the logs, off the hot path): the
    explicit argument, ``PYAR_ALGO``, or ``auto`` with the cost model's top predictions."""
    if algorithm != AUTO:
        return "explicit argument"
    text = _pyar_algo()
    named = forced(text, collective) if text else None
    if named and named != AUTO:
        return f"PYAR_ALGO={text}"
    key = (collective, size, count, str(dtype), _tuning_file(), id(topology), generation[0])
    found = _reasons.get(key)
    if found is None:
        if len(_reasons) >= _MEMO_SIZE:
            _reasons.clear()
        times = sorted((p.time, name) for name, (p, _) in predictions(
            collective, size, count, dtype, parameters(), topology=topology).items())
        found = _reasons[key] = ("auto: " + ", ".join(f"{name} {t * 1e6:.1f} us"
                                                      for t, name in times[:3])
                                 + ("" if len(times) <= 3 else ", ..."), topology)
    return found[0]


_reasons: dict = {}


def choose(collective: str, size: int, count: int, dtype, params: cost.Params,
           topology=None) -> str:
    """The candidate with the least predicted time (ties: the first by name)."""
    times = {name: p.time for name, (p, _) in predictions(collective, size, count, dtype,
                                                            params, topology=topology).items()}
    if not times:
        raise ValueError(f"auto: no {collective} algorithm can be costed for {size} ranks; "
                         f"name one")
    return min(sorted(times), key=times.get)


def predictions(collective: str, size: int, count: int, dtype, params: cost.Params,
                names=None, *, exact: bool = False, topology=None) -> dict:
    """``{name: (Prediction, source)}`` for ``names`` (default: the candidates on ``topology``)."""
    out = {}
    for name in candidates(collective, topology) if names is None else names:
        try:
            out[name] = cost.estimate(collective, name, size, count, dtype, params, exact=exact,
                                      topology=topology)
        except (ValueError, ScheduleError):
            if names is not None:
                raise
    return out


def candidates(collective: str, topology=None) -> list[str]:
    """What ``auto`` chooses from: the algorithms registered with ``auto=True``.

    A topology-aware one only when ``topology`` has several nodes: on one
    node it is another algorithm (``hierarchical`` a plain ring).
    """
    several = topology is not None and len(topology.nodes) > 1
    records = (registered(name, collective) for name in algorithms(collective) if name != LIBRARY)
    return [a.name for a in records if a.auto and (several or not a.topology_aware)]


_library = [None]       # what describes the MPI library tuned for (:func:`use_library`)


def use_library(current) -> None:
    """Tune for the MPI library that ``current()`` describes (a
    :class:`pyar.runtime.library.Library`: its ``slug`` names the tuning file, its ``eager``
    limit adjusts the defaults). The runtime, which detects the library, says so when it is
    imported; the model itself never starts MPI."""
    _library[0] = current
    defaults.cache_clear()


def _described():
    """The MPI library tuned for, or None before the runtime has said (no MPI)."""
    return None if _library[0] is None else _library[0]()


def tuning_path() -> Path:
    """``$PYAR_TUNING_FILE``, else ``$XDG_CACHE_HOME/pyar/tuning-LIBRARY.json`` (``~/.cache``
    default; LIBRARY the MPI library's slug, e.g. ``openmpi-5.0.11``: each library is tuned
    apart, as its latencies and limits differ; ``none`` without MPI)."""
    path = os.environ.get("PYAR_TUNING_FILE")
    if path:
        return Path(path)
    lib = _described()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "pyar" / f"tuning-{'none' if lib is None else lib.slug}.json"


@functools.lru_cache(maxsize=None)
def defaults() -> cost.Params:
    """:data:`DEFAULTS` (measured under MPICH), with the eager limit of another library where
    it tells one."""
    lib = _described()
    if lib is None or lib.family == "mpich" or lib.eager is None:
        return DEFAULTS
    return DEFAULTS._replace(eager=float(lib.eager))


def parameters() -> cost.Params:
    """The machine parameters in force: the tuning file's, else :func:`defaults`."""
    key = _tuning_file()
    params = _params.get(key)
    if params is None:
        path = tuning_path()
        params = _params[key] = load(path) if path.exists() else defaults()
    return params


def source() -> str:
    """Where :func:`parameters` came from, in words."""
    path = tuning_path()
    if path.exists():
        return str(path)
    params = parameters()
    eager = "" if params.eager == DEFAULTS.eager else \
        f", the eager limit {int(params.eager)} B from the library"
    return f"shipped defaults (measured under MPICH{eager}; no {path})"


def load(path) -> cost.Params:
    """The parameters in the tuning file (or machine description) at ``path``; ValueError
    saying what is wrong."""
    return machine(path)[0]


def machine(path) -> tuple[cost.Params, dict]:
    """The parameters of the tuning file or machine description at ``path``, and what else it
    says: ``nodes`` and ``ranks_per_node`` (if given), ``description`` and ``source``."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"tuning file {path}: cannot read it as JSON ({e})") from None
    expected = (f"a JSON object with \"format\": {FORMAT!r}, numbers alpha, beta, delta >= 0 "
                f"(seconds), gamma, an object of dtype name -> seconds per byte, and "
                f"optionally eager (bytes > 0, or null: no limit), rendezvous >= 0 (seconds), "
                f"resident >= 0 (bytes), inter_node {{\"alpha\": s, \"beta\": s/B}} (between "
                f"nodes), nodes and ranks_per_node (ints >= 1), ports (an int >= 1: the "
                f"messages a rank sends and receives at once), network (an object with "
                f"\"kind\": {', '.join(network.KINDS)}: see pyar.model.network), memory (a list "
                f"of [buffer bytes > 0, beta, gamma, delta >= 0] rows in increasing size: the "
                f"memory terms, see pyar.model.cost)")
    try:
        if data["format"] != FORMAT or not data["gamma"]:
            raise ValueError
        gamma = {np.dtype(k).name: float(v) for k, v in data["gamma"].items()}
        eager = data.get("eager")
        inter = data.get("inter_node") or {}
        if not isinstance(inter, dict) or set(inter) - {"alpha", "beta"}:
            raise ValueError
        params = cost.Params(float(data["alpha"]), float(data["beta"]), gamma,
                             float(data["delta"]), math.inf if eager is None else float(eager),
                             float(data.get("rendezvous", 0.0)), float(data.get("resident", 0.0)),
                             *(None if inter.get(k) is None else float(inter[k])
                               for k in ("alpha", "beta")))
        layout = {k: data[k] for k in ("nodes", "ranks_per_node") if data.get(k) is not None}
        ports = data.get("ports", 1)
        if not all(type(v) is int and v >= 1 for v in (*layout.values(), ports)):
            raise ValueError
        memory = tuple((float(n), float(b), float(g), float(d))
                       for n, b, g, d in data.get("memory") or ())
        if any(not row[0] > 0 for row in memory) or any(
                a[0] >= b[0] for a, b in zip(memory, memory[1:])):
            raise ValueError
        params = params._replace(ports=ports, memory=memory)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise ValueError(f"tuning file {path}: expected {expected}") from None
    if data.get("network") is not None:
        try:
            params = params._replace(network=network.from_spec(data["network"]))
        except ValueError as e:
            raise ValueError(f"tuning file {path}: {e}") from None
    if not all(math.isfinite(v) and v >= 0 for v in
               (params.alpha, params.beta, params.delta, params.rendezvous, params.resident,
                *params.inter(), *gamma.values(), *(v for row in params.memory for v in row))
               ) or not params.eager > 0:
        raise ValueError(f"tuning file {path}: expected {expected}")
    return params, {**layout, **{k: str(data[k]) for k in ("description", "source")
                                  if k in data}}


def save(path, params: cost.Params, measured: dict) -> None:
    """Write ``params`` (and what ``measured`` says of how) as a tuning file at ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": FORMAT, "alpha": params.alpha, "beta": params.beta,
            "delta": params.delta, "gamma": params.gamma,
            "eager": params.eager if math.isfinite(params.eager) else None,
            "rendezvous": params.rendezvous, "resident": params.resident, "measured": measured}
    if params.links:
        data["inter_node"] = dict(zip(("alpha", "beta"), params.inter()))
    if params.ports > 1:
        data["ports"] = params.ports
    if params.memory:
        data["memory"] = [list(row) for row in params.memory]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    _params.clear()
    _memo.clear()
