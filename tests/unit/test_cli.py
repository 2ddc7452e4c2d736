"""`pyar info` and `pyar sim` (`pyar bench`: test_bench.py)."""

import os
import subprocess
import sys


def test_info_names_versions_library_and_algorithms():
    proc = subprocess.run([sys.executable, "-m", "pyar", "info"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("pyar ")
    for needle in ("numpy ", "mpi4py ", "MPI library: ", "MPI standard: ",
                   "allreduce algorithms: bine, binomial, double_binary_tree, hierarchical, ",
                   "alltoall algorithms: linear, pairwise, mpi"):
        assert needle in out, out


def test_info_says_how_large_messages_move_in_a_node():
    """One rank reads its own memory: the probe passes where process_vm_readv exists, and
    PYAR_CMA=0 names itself as the reason for the mailboxes."""
    lines = {}
    for cma in ("1", "0"):
        proc = subprocess.run([sys.executable, "-m", "pyar", "info"], capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYAR_CMA": cma})
        assert proc.returncode == 0, proc.stderr
        lines[cma] = next(line for line in proc.stdout.splitlines()
                          if line.startswith("large messages in a node: "))
    assert lines["0"].endswith("through shared-memory mailboxes (PYAR_CMA=0)"), lines
    assert "process_vm_readv" in lines["1"] and lines["1"].endswith("(PYAR_CMA=1)"), lines


def test_sim_reports_traffic_and_correctness():
    proc = subprocess.run([sys.executable, "-m", "pyar", "sim", "-N", "16", "--count", "1600",
                           "-a", "ring,naive"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if not line.startswith("#")}
    assert rows["ring"][1:3] == ["30", str(2 * 15 * 100 * 4)]      # 2(N-1) steps, 2(N-1)/N*M
    assert rows["naive"][1:3] == ["2", str(15 * 1600 * 4)]
    assert rows["ring"][-1] == rows["naive"][-1] == "yes"
    nodes = subprocess.run([sys.executable, "-m", "pyar", "sim", "-N", "16", "--count", "4096",
                            "-a", "ring,hierarchical", "--ranks-per-node", "4"],
                           capture_output=True, text=True, timeout=120)
    rows = {line.split()[0]: line.split() for line in nodes.stdout.splitlines()
            if not line.startswith("#")}
    assert "4 nodes" in nodes.stdout and rows["hierarchical"][-1] == "yes"
    # 4 nodes each send 2(K-1)/K of the 16 KiB buffer across; ring crosses 4 links each 2(N-1)/N
    assert int(rows["hierarchical"][5]) == 4 * 2 * 3 / 4 * 16384
    assert int(rows["ring"][5]) == 4 * 2 * 15 / 16 * 16384
    bad = subprocess.run([sys.executable, "-m", "pyar", "sim", "-a", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown allreduce algorithm 'nope'" in bad.stderr
