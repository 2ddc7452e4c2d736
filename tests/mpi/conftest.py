"""Run under mpiexec: every rank runs the same tests in the same order.

Hypothesis is derandomized (or seeded alike: ``--hypothesis-seed``) so every rank draws the
same examples, and every assertion is made collective (see ``agree``) so that ranks never go
out of step.

A test marked ``sweep`` enumerates cases (algorithms, layouts, sizes ...) with parametrize.
``PYAR_TEST_SHARD=i/n`` keeps case k of each sweep where k % n == i and every other test;
``PYAR_TEST_SHARD=i/n:all`` splits the other tests too (test k of them, in collection order,
where k % n == i). The matrix (tests/test_mpi_matrix.py) splits the sweeps between its two
runs of one rank count, so that each case runs at every rank count, under one of the two
settings; at 5 and 8 ranks, every test.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from mpi4py import MPI


def pytest_configure(config):
    """Every rank draws the same examples: hypothesis derandomized, or seeded alike on every
    rank by ``--hypothesis-seed`` (the matrix, tests/test_mpi_matrix.py, gives each of its runs
    a seed of its own, and draws fewer examples per run)."""
    seeded = config.getoption("--hypothesis-seed", None) is not None
    settings.register_profile(
        "mpi", derandomize=not seeded, database=None, deadline=None,
        max_examples=int(os.environ.get("PYAR_TEST_EXAMPLES", "150")),
        suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False)
    settings.load_profile("mpi")


def pytest_collection_modifyitems(config, items):
    shard = os.environ.get("PYAR_TEST_SHARD")
    if not shard:
        return
    spec, _, every = shard.partition(":")
    i, _, n = spec.partition("/")
    if not (i.isdigit() and n.isdigit() and int(i) < int(n)) or every not in ("", "all"):
        raise pytest.UsageError(f"PYAR_TEST_SHARD={shard!r}: expected i/n or i/n:all, "
                                f"0 <= i < n")
    i, n = int(i), int(n)
    cases: dict = {}            # each sweep's cases so far, in collection order (every rank's);
    kept, left = [], []         # under None, the other tests' (when every test is split)
    for item in items:
        sweep = item.get_closest_marker("sweep") is not None
        if sweep or every:
            key = item.nodeid.partition("[")[0] if sweep else None
            k = cases[key] = cases.get(key, -1) + 1
            if k % n != i:
                left.append(item)
                continue
        kept.append(item)
    config.hook.pytest_deselected(items=left)
    items[:] = kept


@pytest.fixture
def comm():
    return MPI.COMM_WORLD
