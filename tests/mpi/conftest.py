"""Run under mpiexec: every rank runs the same tests in the same order.

Hypothesis is derandomized so every rank draws the same examples, and every
assertion is made collective (see ``agree``) so that ranks never go out of step.
"""

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from mpi4py import MPI

settings.register_profile(      # the matrix (tests/test_mpi_matrix.py) draws fewer per run
    "mpi", derandomize=True, database=None, deadline=None,
    max_examples=int(os.environ.get("PYAR_TEST_EXAMPLES", "150")),
    suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False)
settings.load_profile("mpi")


@pytest.fixture
def comm():
    return MPI.COMM_WORLD
