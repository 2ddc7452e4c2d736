"""``pyar verify --collective reduce_scatter|allgather``: every registered algorithm of
each, and the MPI library's, pass the smoke profile on 1, 3 and 4 ranks (4 in ``make
test-all`` only); deliberately broken ones (tests/verify_targets/broken_collectives.py) are
caught, and the reduce_scatter's bug shrunk to a small case whose reproducer fails; a collective verify does not offer is a
clear error. Real MPI jobs, started by pyar verify itself."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import pyar
from pyar import cli
from pyar.verify import cases as C, check
from pyar.verify.driver import parse_ranks

# 1 and 3 ranks in make test, 4 (the power of two; 4 ranks on 2 cores) in make test-all
RANKS = ["1,3", pytest.param("4", marks=pytest.mark.full)]
BROKEN = Path(__file__).parents[1] / "verify_targets" / "broken_collectives.py"


@pytest.mark.mpiexec
@pytest.mark.parametrize("ranks", RANKS)
@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather"])
def test_every_pyar_algorithm_and_mpis_pass(collective, ranks, tmp_path):
    out = tmp_path / "verify.json"
    proc = subprocess.run([sys.executable, "-m", "pyar", "verify", "--collective", collective,
                           "pyar:all", "--profile", "smoke",
                           "--ranks", ranks, "--no-shrink", "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stdout[-6000:] + proc.stderr[-3000:]
    data = json.loads(out.read_text())
    assert data["collective"] == collective
    names = {f"pyar:{a}" for a in pyar.algorithms(collective) if a != "mpi"}
    assert {r["target"] for r in data["results"]} == names
    assert {r["ranks"] for r in data["results"]} == set(parse_ranks(ranks)) \
        and not data["not_run"]
    assert {r["case"]["collective"] for r in data["results"]} == {collective}
    wrong = [r for r in data["results"] if r["verdict"] != "pass"]
    assert not wrong and proc.returncode == 0, proc.stdout[-6000:]
    # the MPI library's (its MPI_MAX and MPI_MIN need not propagate NaN: --nan mpi)
    report = check("mpi", ranks=parse_ranks(ranks), profile="smoke", nan="mpi", collective=collective,
                   shrink=False)
    assert report, report.text()


@pytest.mark.mpiexec
def test_a_reduce_scatter_with_a_wrong_block_is_caught_and_shrunk(tmp_path):
    report = check(f"{BROKEN}:reduce_scatter_unfolded_tail", ranks=[3], profile="smoke",
                   collective="reduce_scatter", case_timeout=30, confirm=False,
                   shrink_examples=25)
    failed = [r for r in report.results if r["verdict"] == "fail"]
    assert failed and not report, report.text()
    assert all(r["case"]["count"] % 3 for r in failed), "failed where the blocks are equal"
    assert any(r["verdict"] == "pass" and r["case"]["count"] % 3 == 0 and r["case"]["count"]
               for r in report.results), "no equal blocks passed"
    assert "its block" in failed[0]["problems"][0]
    small = failed[0]["smallest"]
    assert small["ranks"] <= 3 and small["case"]["count"] <= 16, small
    script = tmp_path / "repro.py"
    script.write_text(small["script"])
    mpiexec = Path(sys.executable).with_name("mpiexec")
    proc = subprocess.run(["timeout", "-k", "5", "60", str(mpiexec), "-n", str(small["ranks"]),
                           sys.executable, str(script)], capture_output=True, text=True,
                          timeout=90, cwd=tmp_path)
    assert proc.returncode == 1 and ": fail" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.mpiexec
def test_an_allgather_that_swaps_two_ranks_pieces_is_caught():
    report = check(f"{BROKEN}:allgather_swapped", ranks=[1, 2], profile="smoke",
                   collective="allgather", dims=["counts"], case_timeout=30, shrink=False)
    one = [r for r in report.results if r["ranks"] == 1]
    two = [r for r in report.results if r["ranks"] == 2 and r["case"]["count"]]
    assert one and all(r["verdict"] == "pass" for r in one), report.text()
    assert two and all(r["verdict"] == "fail" for r in two), report.text()
    assert "rank 1's element 0" in " ".join(two[0]["problems"])


def test_a_collective_verify_does_not_offer_is_a_clear_error(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["verify", "--collective", "alltoall", "mpi"])
    assert stop.value.code == 2
    assert "invalid choice: 'alltoall'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="collective must be one of allreduce, "
                                         "reduce_scatter, allgather, got 'bcast'"):
        check("mpi", collective="bcast")


def test_each_collective_gets_the_sweep_it_defines():
    for size in (1, 3, 4):
        scatter = C.sweep(size, "quick", collective="reduce_scatter")
        counts = {c["count"] for c in scatter if c["dim"] == "counts"}
        assert {size * 13, size * 1031} <= counts and {0, 1, size + 1} <= counts
        assert any(c["mode"] == "inplace" for c in scatter)
        gather = C.sweep(size, "quick", collective="allgather")
        assert gather and not any(c["mode"] == "inplace" for c in gather)
        assert {c["collective"] for c in gather} == {"allgather"}
