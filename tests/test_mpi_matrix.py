"""The MPI tests (tests/mpi) at every rank count of the matrix, each run under a timeout;
two runs emulate several nodes on this machine with PYAR_RANKS_PER_NODE, two give small
plans' messages less shared memory (PYAR_SHM_BYTES): none, or enough for a few plans."""

import pytest

from launch import explain, run


@pytest.mark.parametrize("nprocs,ranks_per_node,shm_bytes", [
    (1, None, None), (2, None, None), (3, None, None), (4, None, None), (5, None, None),
    (8, None, None),
    (5, 2, None), (8, 3, None),     # emulated nodes of unequal size: 2+2+1 and 3+3+2
    (3, None, "0"),                 # no shared-memory mailboxes: small plans on MPI requests
    (4, None, "20000")])            # mailboxes for the first plans only, then MPI
def test_mpi_suite(nprocs, ranks_per_node, shm_bytes):
    env = {"PYAR_RANKS_PER_NODE": str(ranks_per_node)} if ranks_per_node else {}
    if shm_bytes is not None:
        env["PYAR_SHM_BYTES"] = shm_bytes
    proc = run(nprocs, "-m", "pytest", "tests/mpi", "-q", "--capture=sys", "-p",
               "no:cacheprovider", "--timeout=240", "--timeout-method=thread", timeout=400,
               env=env)
    assert proc.returncode == 0, explain(proc)
    assert " passed" in proc.stdout and " failed" not in proc.stdout, explain(proc)
