"""The MPI tests (tests/mpi) at every rank count of the matrix, each run under a timeout;
two runs emulate several nodes on this machine with PYAR_RANKS_PER_NODE."""

import pytest

from launch import explain, run


@pytest.mark.parametrize("nprocs,ranks_per_node", [
    (1, None), (2, None), (3, None), (4, None), (5, None), (8, None),
    (5, 2), (8, 3)])    # emulated nodes of unequal size: 2+2+1 and 3+3+2
def test_mpi_suite(nprocs, ranks_per_node):
    env = {"PYAR_RANKS_PER_NODE": str(ranks_per_node)} if ranks_per_node else {}
    proc = run(nprocs, "-m", "pytest", "tests/mpi", "-q", "--capture=sys", "-p",
               "no:cacheprovider", "--timeout=240", "--timeout-method=thread", timeout=400,
               env=env)
    assert proc.returncode == 0, explain(proc)
    assert " passed" in proc.stdout and " failed" not in proc.stdout, explain(proc)
