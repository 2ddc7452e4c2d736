"""The MPI tests (tests/mpi) at every rank count of the matrix, each run under a timeout."""

import pytest

from launch import explain, run


@pytest.mark.parametrize("nprocs", [1, 2, 3, 4, 5, 8])
def test_mpi_suite(nprocs):
    proc = run(nprocs, "-m", "pytest", "tests/mpi", "-q", "--capture=sys", "-p",
               "no:cacheprovider", "--timeout=240", "--timeout-method=thread", timeout=400)
    assert proc.returncode == 0, explain(proc)
    assert " passed" in proc.stdout and " failed" not in proc.stdout, explain(proc)
