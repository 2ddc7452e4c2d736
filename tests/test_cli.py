"""`pyar info` and `pyar bench`."""

import subprocess
import sys

import pytest

import pyar

from launch import explain, run

from pyar.bench import format_size, parse_size, sizes


def test_info_names_versions_library_and_algorithms():
    proc = subprocess.run([sys.executable, "-m", "pyar", "info"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.startswith("pyar ")
    for needle in ("numpy ", "mpi4py ", "MPI library: ", "MPI standard: ",
                   "allreduce algorithms: binomial, double_binary_tree, hierarchical, naive, ",
                   "alltoall algorithms: linear, pairwise, mpi"):
        assert needle in out, out


@pytest.mark.parametrize("nprocs", [2, 3])
def test_bench_checks_every_row(nprocs):
    proc = run(nprocs, "-m", "pyar", "bench", "-b", "8", "-e", "64K", "-f", "64", "-n", "3",
               "-w", "1", timeout=200)
    assert proc.returncode == 0, explain(proc)
    rows = [line.split() for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert len(rows) == 3 * len(pyar.algorithms()), proc.stdout
    assert {row[0] for row in rows} == set(pyar.algorithms())
    assert all(row[-1] == "yes" for row in rows), proc.stdout
    assert f"{nprocs} ranks" in proc.stdout


def test_bench_rejects_unknown_algorithm():
    proc = run(1, "-m", "pyar", "bench", "-a", "nope", timeout=100)
    assert proc.returncode == 2 and "unknown allreduce algorithm 'nope'" in proc.stderr


def test_sizes_parse_like_nccl_tests():
    assert [parse_size(s) for s in ("8", "64K", "4M", "1G", "2KiB")] == \
        [8, 65536, 4 << 20, 1 << 30, 2048]
    assert sizes(8, 128, 4) == [8, 32, 128]
    assert format_size(4 << 20) == "4M" and format_size(1000) == "1000"
    with pytest.raises(ValueError, match="size must look like"):
        parse_size("lots")


def test_sim_reports_traffic_and_correctness():
    proc = subprocess.run([sys.executable, "-m", "pyar", "sim", "-n", "16", "-c", "1600",
                           "-a", "ring,naive"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if not line.startswith("#")}
    assert rows["ring"][1:3] == ["30", str(2 * 15 * 100 * 4)]      # 2(N-1) steps, 2(N-1)/N*M
    assert rows["naive"][1:3] == ["2", str(15 * 1600 * 4)]
    assert rows["ring"][-1] == rows["naive"][-1] == "yes"
    bad = subprocess.run([sys.executable, "-m", "pyar", "sim", "-a", "nope"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown allreduce algorithm 'nope'" in bad.stderr
