"""PYAR_* settings that are bad, or differ where the ranks must agree, on some ranks only:
an error on every rank when the Comm is made, never a hang."""

import re

import numpy as np
import pytest
from mpi4py import MPI

import pyar
from pyar.runtime import settings

from checks import agree

pytestmark = pytest.mark.timeout(60)    # a regression hangs: fail visibly, not for ever


@pytest.fixture(autouse=True)
def keep_agreed(monkeypatch):
    """What the ranks agreed on before the test, back after it (the Comms made here agree)."""
    monkeypatch.setattr(settings, "_agreed", settings._agreed)

BAD = [("PYAR_RANKS_PER_NODE", "two", "an integer >= 1"),
       ("PYAR_SHM_BYTES", "-1", "an integer >= 0"),
       ("PYAR_TIMEOUT", "soon", "a number of seconds > 0"),
       ("PYAR_CUDA_AWARE", "yes", "0 .* or 1"),
       ("PYAR_CMA", "2", "0 .* or 1"),
       ("PYAR_REPRODUCIBLE", "on", "0 .* or 1")]


def outcome(make):
    try:
        return make()
    except Exception as e:      # judged collectively by the caller
        return e


def make_and_use(comm):
    """The error making a pyar.Comm of ``comm``, or, made on every rank, running a small
    allreduce on it (today's hangs were there); None if neither failed here."""
    made = outcome(lambda: pyar.Comm(comm))
    everywhere = np.array([isinstance(made, pyar.Comm)], np.int32)
    comm.Allreduce(MPI.IN_PLACE, everywhere, MPI.MIN)
    if not everywhere[0]:
        return None if isinstance(made, pyar.Comm) else made
    error = outcome(lambda: pyar.allreduce(np.ones(4), comm=made))
    made.free()
    return error


def odd_one(comm) -> int:
    """The rank given a setting of its own: the last (so not the root of anything)."""
    return comm.size - 1


@pytest.mark.parametrize("name,value,expected", BAD, ids=[b[0] for b in BAD])
def test_a_bad_setting_on_one_rank_is_an_error_on_every_rank(comm, monkeypatch, name, value,
                                                            expected):
    if comm.rank == odd_one(comm):
        monkeypatch.setenv(name, value)
    error = make_and_use(comm)
    if comm.rank == odd_one(comm):
        ok = isinstance(error, ValueError) and \
            re.search(f"{name} must be {expected}.*got '{value}'", str(error)) is not None
    else:
        ok = isinstance(error, ValueError) and \
            f"rank {odd_one(comm)} has a bad {name}" in str(error)
    agree(comm, ok, repr(error))


@pytest.mark.parametrize("name,values", [("PYAR_RANKS_PER_NODE", ("1", None)),
                                         ("PYAR_RANKS_PER_NODE", ("1", "2")),
                                         ("PYAR_SHM_BYTES", ("0", None)),
                                         ("PYAR_SHM_BYTES", ("0", "8192")),
                                         ("PYAR_ALGO", ("ring", None)),
                                         ("PYAR_ALGO", ("allreduce:bogus", "ring")),
                                         ("PYAR_REPRODUCIBLE", ("1", None))])
def test_settings_that_must_agree_differing_are_an_error_on_every_rank(comm, monkeypatch, name,
                                                                       values):
    """Ranks disagreeing on the node layout or on whether there are mailboxes would wait in
    different collectives, and on PYAR_ALGO run different algorithms (or raise alone)."""
    if comm.size == 1:
        pytest.skip("needs two ranks to differ")
    mine = values[comm.rank == odd_one(comm)]
    if mine is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, mine)
    error = make_and_use(comm)
    agree(comm, isinstance(error, ValueError) and f"{name} must be" in str(error)
          and f"rank {odd_one(comm)}" in str(error), repr(error))


def test_valid_settings_differing_harmlessly_are_fine(comm, monkeypatch):
    """Mailbox sizes and timeouts may differ per rank; the Comm made works."""
    monkeypatch.setenv("PYAR_SHM_BYTES", str(8192 * (comm.rank + 1)))
    monkeypatch.setenv("PYAR_TIMEOUT", str(100 + comm.rank))
    c = outcome(lambda: pyar.Comm(comm))
    ok = isinstance(c, pyar.Comm)
    if ok:
        x = np.arange(8.0) + comm.rank
        ok = np.array_equal(pyar.allreduce(x, comm=c), comm.size * np.arange(8.0) +
                            comm.size * (comm.size - 1) / 2)
        c.free()
    agree(comm, ok, repr(c))
