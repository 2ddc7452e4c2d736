"""PYAR_ALGO's meaning: NCCL_ALGO's. A bare name is that algorithm wherever a
collective has it and auto elsewhere; ``collective:name`` entries win over it; anything
unknown, anywhere in the value, is one ValueError listing what is valid."""

import numpy as np
import pytest
from hypothesis import given, strategies as st
from mpi4py import MPI

import pyar
from pyar.model import tuner
from pyar.collectives import names

ARGS = (4, 1 << 10, 4 << 10)        # size, count, nbytes


def auto_choice(collective):
    return tuner.choose(collective, ARGS[0], ARGS[1], "float32", tuner.parameters())


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    monkeypatch.delenv("PYAR_ALGO", raising=False)


@pytest.mark.parametrize("collective", names())
def test_a_bare_name_applies_where_the_collective_has_it_and_auto_elsewhere(monkeypatch,
                                                                            collective):
    monkeypatch.setenv("PYAR_ALGO", "ring")
    expected = "ring" if "ring" in pyar.algorithms(collective) else auto_choice(collective)
    assert tuner.select(collective, "auto", *ARGS) == expected


def test_a_bare_name_no_collective_has_is_an_error_naming_the_valid_ones(monkeypatch):
    monkeypatch.setenv("PYAR_ALGO", "rnig")
    for collective in names():      # whichever collective is called: the same error
        with pytest.raises(ValueError) as e:
            tuner.select(collective, "auto", *ARGS)
        message = str(e.value)
        assert "PYAR_ALGO='rnig': no collective has an algorithm 'rnig'" in message
        assert "bcast: bine, binomial, knomial, scatter_allgather, mpi" in message
        assert "allreduce: bine, binomial" in message and "'auto'" in message


@pytest.mark.parametrize("value,wrong", [
    ("allreduce:bogus", "unknown allreduce algorithm 'bogus'"),
    ("bcast:ring", "unknown bcast algorithm 'ring'"),
    ("ring;allgather:nope", "unknown allgather algorithm 'nope'"),
    ("allreduce_x:ring", "unknown collective 'allreduce_x'")])
def test_an_unknown_entry_anywhere_is_an_error_for_every_collective(monkeypatch, value, wrong):
    monkeypatch.setenv("PYAR_ALGO", value)
    for collective in ("allreduce", "barrier"):
        with pytest.raises(ValueError, match=wrong):
            tuner.select(collective, "auto", *ARGS)


def test_entries_win_over_the_bare_name_and_the_argument_over_both(monkeypatch):
    monkeypatch.setenv("PYAR_ALGO", "ring; allreduce:binomial ;bcast:auto")
    assert tuner.select("allreduce", "auto", *ARGS) == "binomial"
    assert tuner.select("allgather", "auto", *ARGS) == "ring"
    assert tuner.select("bcast", "auto", *ARGS) == auto_choice("bcast")
    assert tuner.select("alltoall", "auto", *ARGS) == auto_choice("alltoall")
    assert tuner.select("allreduce", "naive", *ARGS) == "naive"
    monkeypatch.setenv("PYAR_ALGO", "mpi")      # every collective has the library's own
    assert all(tuner.select(c, "auto", *ARGS) == "mpi" for c in names())


def test_a_name_registered_later_becomes_valid(monkeypatch, scratch_registry):
    monkeypatch.setenv("PYAR_ALGO", "t_later")
    with pytest.raises(ValueError, match="no collective has"):
        tuner.select("bcast", "auto", *ARGS)
    pyar.register_algorithm("t_later", "bcast")(lambda rank, size, count, topology=None: [])
    assert tuner.select("bcast", "auto", *ARGS) == "t_later"
    assert tuner.select("allreduce", "auto", *ARGS) == auto_choice("allreduce")


NAMES = sorted({n for c in names() for n in pyar.algorithms(c)} | {"auto", "bogus"})


@given(st.lists(st.tuples(st.sampled_from([None, *names()]), st.sampled_from(NAMES)),
                max_size=4))
def test_any_value_means_what_its_entries_say(entries):
    """The model: the last entry of a collective, else the last bare one if the collective has
    it; ``auto`` means the choice of the cost model; any unknown name is an error."""
    text = ";".join(name if c is None else f"{c}:{name}" for c, name in entries)
    known = all(name == "auto" or (any(name in pyar.algorithms(k) for k in names())
                                   if c is None else name in pyar.algorithms(c))
                for c, name in entries)
    for collective in names():
        if not known:
            with pytest.raises(ValueError, match="PYAR_ALGO="):
                tuner.forced(text, collective)
            continue
        own = [n for c, n in entries if c == collective]
        bare = [n for c, n in entries if c is None]
        want = own[-1] if own else (bare[-1] if bare and bare[-1] in
                                    pyar.algorithms(collective) else None)
        assert tuner.forced(text, collective) == (None if want == "auto" else want)


def test_every_collective_runs_under_a_bare_name(monkeypatch):
    """Today's failure: PYAR_ALGO=ring made bcast and reduce_scatter raise."""
    monkeypatch.setenv("PYAR_ALGO", "ring")
    x = np.arange(6.0)
    assert np.array_equal(pyar.bcast(x.copy(), comm=MPI.COMM_SELF), x)
    assert np.array_equal(pyar.reduce_scatter(x, comm=MPI.COMM_SELF), x)
    assert np.array_equal(pyar.reduce(x, comm=MPI.COMM_SELF), x)
    assert np.array_equal(pyar.allgather(x, comm=MPI.COMM_SELF), x[None])
    pyar.barrier(comm=MPI.COMM_SELF)
