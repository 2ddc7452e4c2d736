"""The PYAR_* settings on one rank: parsing, the errors, what is agreed (tests/mpi/test_settings.py
has ranks that differ)."""

import pytest
from mpi4py import MPI

import pyar
from pyar.runtime import settings

NAMES = ["PYAR_RANKS_PER_NODE", "PYAR_SHM_BYTES", "PYAR_TIMEOUT", "PYAR_CUDA_AWARE",
         "PYAR_CMA", "PYAR_REPRODUCIBLE"]


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """No PYAR_* setting, and nothing agreed, during a test; the process's agreement after."""
    for name in NAMES + ["PYAR_ALGO"]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(settings, "_agreed", None)


POSITIVE = "a number of seconds > 0"
BAD = [("PYAR_RANKS_PER_NODE", "0", "an integer >= 1"), ("PYAR_RANKS_PER_NODE", "2x", "an integer"),
       ("PYAR_RANKS_PER_NODE", "1.5", "an integer"), ("PYAR_SHM_BYTES", "-1", "an integer >= 0"),
       ("PYAR_SHM_BYTES", "4M", "an integer >= 0"), ("PYAR_TIMEOUT", "0", POSITIVE),
       ("PYAR_TIMEOUT", "-3", POSITIVE), ("PYAR_TIMEOUT", "nan", POSITIVE),
       ("PYAR_TIMEOUT", "1 min", POSITIVE), ("PYAR_CUDA_AWARE", "yes", r"0 \(.*\) or 1"),
       ("PYAR_CMA", "on", r"0 \(.*\) or 1"), ("PYAR_REPRODUCIBLE", "yes", r"0 \(.*\) or 1")]


@pytest.mark.parametrize("name,value,expected", BAD)
def test_a_bad_value_names_the_variable_what_it_takes_and_what_it_got(monkeypatch, name, value,
                                                                      expected):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"{name} must be {expected}.*got '{value}'"):
        settings.read()
    with pytest.raises(ValueError, match=f"{name} must be"):
        pyar.Comm(MPI.COMM_SELF)            # before its first collective operation


def test_every_bad_variable_is_named_at_once(monkeypatch):
    monkeypatch.setenv("PYAR_SHM_BYTES", "lots")
    monkeypatch.setenv("PYAR_TIMEOUT", "never")
    with pytest.raises(ValueError, match="PYAR_SHM_BYTES must be .*; PYAR_TIMEOUT must be"):
        settings.read()


def test_values_and_defaults(monkeypatch):
    assert settings.read()[:4] == (None,) * 4 and settings.timeout() is None
    for name, value in zip(NAMES, ["3", "0", "90", " 1 "]):
        monkeypatch.setenv(name, value)
    assert settings.read()[:4] == (3, 0, 90.0, True)


def test_the_executors_see_what_the_ranks_agreed_on(monkeypatch):
    """A Comm agrees on the settings; a later change of the environment waits for the next."""
    monkeypatch.setenv("PYAR_TIMEOUT", "30")
    monkeypatch.setenv("PYAR_RANKS_PER_NODE", "1")
    c = pyar.Comm(MPI.COMM_SELF)
    monkeypatch.setenv("PYAR_TIMEOUT", "bad now")
    assert settings.timeout() == 30.0 and c.settings.timeout == 30.0
    assert c.topology == pyar.Topology([0])
    c.free()
