"""PYAR_ALGO under MPI: a bare name runs where a collective has it and auto
elsewhere, every collective giving the MPI library's result; a bad value raises on every
rank (never a hang)."""

import numpy as np
import pytest
from mpi4py import MPI

import pyar
from pyar.model import tuner
from pyar.collectives import collective as record_of, names

from checks import agree

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 60


def outcome(call):
    try:
        return call()
    except Exception as e:      # judged on every rank by agree
        return e


def call(name, x, algorithm):
    if name == "barrier":
        return pyar.barrier(algorithm=algorithm, timeout=TIMEOUT)
    root = pyar.Comm.of(None).size - 1 if record_of(name).rooted else 0
    return pyar.collective(name, x.copy(), root=root, algorithm=algorithm, timeout=TIMEOUT)


@pytest.mark.sweep
@pytest.mark.parametrize("name", names())
@pytest.mark.parametrize("value", ["ring", "recursive_doubling", "ring;allreduce:binomial"])
def test_a_bare_name_runs_every_collective_as_the_library_does(comm, monkeypatch, name, value):
    monkeypatch.setenv("PYAR_ALGO", value)
    size = comm.size
    x = ((comm.rank + 1) * 1000 + np.arange(size * 6, dtype=np.int64)).reshape(size, 6)
    chosen = tuner.select(name, "auto", size, 1, 8)
    table = dict(part.split(":") if ":" in part else (None, part) for part in value.split(";"))
    want = table.get(name) or (table[None] if table[None] in pyar.algorithms(name) else None)
    mine = outcome(lambda: call(name, x, "auto"))
    library = call(name, x, "mpi")
    same = (mine is None and library is None) or (
        isinstance(mine, np.ndarray) and np.array_equal(mine, library))
    agree(comm, same and (want is None or chosen == want),
          f"{name} under PYAR_ALGO={value}: chose {chosen}, wanted {want}; {mine!r}")


def test_a_bad_value_raises_on_every_rank(comm, monkeypatch):
    monkeypatch.setenv("PYAR_ALGO", "rnig")
    errors = [outcome(lambda: call(name, np.ones((comm.size, 2)), "auto")) for name in names()]
    agree(comm, all(isinstance(e, ValueError) and "no collective has an algorithm 'rnig'" in
                    str(e) for e in errors), repr(errors))
    monkeypatch.delenv("PYAR_ALGO")
    assert np.array_equal(pyar.allreduce(np.ones(3), timeout=TIMEOUT), np.full(3, comm.size))
    MPI.COMM_WORLD.Barrier()
