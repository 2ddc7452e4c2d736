"""Radix-k trees (knomial) and algorithm parameters (``name:key=value``) wherever a name goes."""

import subprocess
import sys
import time

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyar
from pyar.algorithms import algorithm, check_name, split_names
from pyar.core.ops import Op
from pyar.model import cost, tuner

from test_algorithms import check_allreduce
from test_collectives import check
from tiers import sizes_up_to_64

RADIXES = (2, 3, 4, 8)
TREES = ("allreduce", "bcast", "reduce")


@pytest.mark.parametrize("k", RADIXES)
@pytest.mark.parametrize("collective", TREES)
@pytest.mark.parametrize("size", sizes_up_to_64())
def test_knomial_at_every_size_up_to_64(collective, k, size):
    name = f"knomial:k={k}"
    if collective == "allreduce":
        for count in (0, 1, size + 1):
            check_allreduce(name, size, count, Op.SUM, np.int32)
        check_allreduce(name, size, 2 * size + 3, Op.SUM, np.float64)
    else:
        for count in (0, 1, size - 1, 3 * size + 1):
            check(collective, name, size, count, root=(size - 1) // 2)
        check(collective, name, size, 7, Op.SUM, np.float64, root=size - 1)


@pytest.mark.parametrize("k", RADIXES)
@pytest.mark.parametrize("collective", TREES)
def test_knomial_at_1024_ranks_in_seconds(collective, k):
    start = time.perf_counter()
    if collective == "allreduce":
        check_allreduce(f"knomial:k={k}", 1024, 2053, Op.SUM, np.int64)
    else:
        check(collective, f"knomial:k={k}", 1024, 2053, root=517)
    assert time.perf_counter() - start < 10


@given(collective=st.sampled_from(TREES), k=st.integers(2, 12), size=st.integers(1, 40),
       count=st.integers(0, 500), root=st.integers(0, 39), seed=st.integers(0, 100),
       op=st.sampled_from([Op.SUM, Op.MAX, Op.PROD]))
def test_knomial_property(collective, k, size, count, root, seed, op):
    if collective == "allreduce":
        check_allreduce(f"knomial:k={k}", size, count, op, np.float32, seed)
    else:
        check(collective, f"knomial:k={k}", size, count, op, np.float64, root % size, seed)


@pytest.mark.parametrize("collective", TREES)
def test_radix_two_is_the_binomial_tree(collective):
    for size in range(1, 40):
        root = 0 if collective == "allreduce" else size // 2
        for name in ("knomial", "knomial:k=2"):
            a = pyar.schedule(name, size, 9, collective=collective, root=root)
            b = pyar.schedule("binomial", size, 9, collective=collective, root=root)
            assert [a.steps(r) for r in range(size)] == [b.steps(r) for r in range(size)]


@pytest.mark.parametrize("collective", TREES)
def test_a_higher_radix_takes_fewer_steps_and_more_messages(collective):
    steps = {}
    for k in RADIXES:
        s = pyar.schedule(f"knomial:k={k}", 64, 64, collective=collective)
        steps[k] = len(s.steps(0))
        terms = cost.formula(collective, f"knomial:k={k}", 64, 64, "float32")
        assert terms.steps == steps[k] and terms.messages >= 6 * (1 + (collective == "allreduce"))
    levels = {2: 6, 3: 4, 4: 3, 8: 2}
    assert steps == {k: levels[k] * (1 + (collective == "allreduce")) for k in RADIXES}


# -- the parameter syntax ------------------------------------------------------------------------

def test_a_parameterized_name_keeps_its_whole_string():
    a = algorithm("knomial:k=3", "bcast")
    assert a.name == "knomial:k=3" and a.builder.keywords == {"k": 3} and not a.auto
    assert algorithm("knomial:k=3", "bcast") is a        # one record: the plan caches hit
    s = pyar.schedule("knomial:k=3", 9, 9, collective="bcast")
    assert s.algorithm == "knomial:k=3"
    assert check_name("segmented_ring:segment=2") == "segmented_ring:segment=2"
    assert cost.formula("allreduce", "segmented_ring:segment=2", 4, 40, "float32").messages \
        == 2 * 3 * 5


@pytest.mark.parametrize("name, why", [
    ("knomial:k=1", "k (the radix) must be an int >= 2, got 1"),
    ("knomial:k=x", "k must be an int, got 'x'"),
    ("knomial:radix=3", "unknown parameter 'radix'"),
    ("knomial:k=3,k=4", "parameter 'k' given twice"),
    ("knomial:k", "'k' is not key=value"),
    ("segmented_ring:segment=0", "segment must be an int >= 1"),
])
def test_bad_parameters_name_the_parameters_and_defaults(name, why):
    with pytest.raises(ValueError) as e:
        check_name(name)
    assert why in str(e.value) and "takes " in str(e.value)
    assert "k=2" in str(e.value) or "segment=32768" in str(e.value)


def test_parameters_on_an_algorithm_without_any_are_an_error():
    with pytest.raises(ValueError, match="'ring' takes no parameters"):
        check_name("ring:k=3")
    with pytest.raises(ValueError, match="unknown allreduce algorithm 'nope'"):
        check_name("nope:k=3")


def test_comma_lists_keep_parameters_with_their_name():
    assert split_names("knomial:k=3,ring, segmented_ring:segment=4 ,auto") == [
        "knomial:k=3", "ring", "segmented_ring:segment=4", "auto"]
    assert split_names("pat:a=1,b=2,ring") == ["pat:a=1,b=2", "ring"]


@pytest.fixture
def no_override(monkeypatch):
    monkeypatch.delenv("PYAR_ALGO", raising=False)
    return monkeypatch


def test_pyar_algo_takes_a_parameterized_name(no_override):
    no_override.setenv("PYAR_ALGO", "knomial:k=4")
    for collective in TREES:
        assert tuner.select(collective, "auto", 8, 64, 256) == "knomial:k=4"
    assert tuner.select("allgather", "auto", 8, 64, 256) != "knomial:k=4"     # auto there
    no_override.setenv("PYAR_ALGO", "bcast:knomial:k=3;allreduce:segmented_ring:segment=8")
    assert tuner.select("bcast", "auto", 8, 64, 256) == "knomial:k=3"
    assert tuner.select("allreduce", "auto", 8, 64, 256) == "segmented_ring:segment=8"
    no_override.setenv("PYAR_ALGO", "knomial:k=1")
    with pytest.raises(ValueError, match="PYAR_ALGO='knomial:k=1'.*must be an int >= 2"):
        tuner.select("bcast", "auto", 8, 64, 256)
    no_override.setenv("PYAR_ALGO", "bcats:knomial")
    with pytest.raises(ValueError, match="unknown collective 'bcats'"):
        tuner.select("bcast", "auto", 8, 64, 256)


def test_the_api_takes_a_parameterized_name(no_override):
    x = np.arange(10, dtype=np.float64)
    assert np.array_equal(pyar.allreduce(x, algorithm="knomial:k=3"), x)       # one rank
    assert np.array_equal(pyar.bcast(x.copy(), algorithm="knomial:k=5"), x)
    with pytest.raises(ValueError, match="k must be an int"):
        pyar.allreduce(x, algorithm="knomial:k=three")


def test_pyar_sim_takes_a_parameterized_name():
    proc = subprocess.run([sys.executable, "-m", "pyar", "sim", "-N", "9", "--count", "900",
                           "-a", "knomial:k=3,binomial,segmented_ring:segment=25"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if line and not line.startswith("#")}
    assert rows["knomial:k=3"][1] == "4" and rows["binomial"][1] == "8"     # 2 log_k N steps
    assert rows["segmented_ring:segment=25"][1] == str(2 * 8 * 4)
    assert all(row[-1] == "yes" for row in rows.values())
    bad = subprocess.run([sys.executable, "-m", "pyar", "sim", "-a", "knomial:k=1"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "must be an int >= 2" in bad.stderr
