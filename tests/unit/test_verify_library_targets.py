"""The named targets of the implementations people use: ``mpi:ALGO`` (the MPI library's
allreduce with its own algorithm forced by its own settings) and ``torch:BACKEND``
(pyar/verify/targets.py, torch_target.py); what a target declines is reported as
unsupported, not failed."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyar.verify import cases as C, check, driver, standalone, targets as T

VENV_BIN = Path(sys.executable).parent


def test_mpich_and_open_mpi_settings_force_the_named_algorithm():
    assert T.setting("mpi:ring", "mpich") == {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    assert T.setting("mpi:rabenseifner", "openmpi") == {
        "OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
        "OMPI_MCA_coll_tuned_allreduce_algorithm": "6"}
    assert T.setting("mpi", "mpich") == {} and T.setting("pyar:ring", "mpich") == {}
    assert T.setting("torch:gloo", "mpich") == {}
    assert T.own_job("mpi:ring") and T.own_job("torch:gloo")
    assert not T.own_job("mpi") and not T.own_job("pyar:ring") and not T.own_job("m.py:f")


def test_an_unknown_algorithm_backend_or_library_is_a_clear_error():
    with pytest.raises(ValueError, match="MPICH has no allreduce algorithm 'rabenseifner'; "
                                         "expected one of: nb, smp, recursive_doubling"):
        T.setting("mpi:rabenseifner", "mpich")
    with pytest.raises(ValueError, match="Open MPI has no .* 'tree'; expected one of: "
                                         "basic_linear, nonoverlapping"):
        T.setting("mpi:tree", "openmpi")
    with pytest.raises(ValueError, match="MPICH and Open MPI only; this MPI library is 'impi'"):
        T.setting("mpi:ring", "impi")
    with pytest.raises(ValueError, match="BACKEND one of gloo, mpi, pyar, nccl"):
        T.setting("torch:ucc", "mpich")


def test_mpich_names_are_the_installed_mpichs_own():
    """MPICH's own list (mpivars prints every control variable and its values)."""
    mpivars = shutil.which("mpivars", path=str(VENV_BIN))
    if T.library_family() != "mpich" or mpivars is None:
        pytest.skip("not MPICH, or no mpivars beside this python")
    text = subprocess.run([mpivars], capture_output=True, text=True, timeout=60).stdout
    block = text.split("MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM=", 1)[1].split("\tMPIR_CVAR", 1)[0]
    listed = [line.split()[0] for line in block.splitlines()[1:] if line.strip()]
    assert tuple(listed) == T.MPICH_ENUM


def test_open_mpi_numbers_are_the_installed_open_mpis_own():
    """Open MPI's own list (ompi_info names each value coll_tuned_allreduce_algorithm takes;
    one it does not take is refused at MPI_Init and its own choice runs instead)."""
    ompi_info = shutil.which("ompi_info", path=str(VENV_BIN))
    if T.library_family() != "openmpi" or ompi_info is None:
        pytest.skip("not Open MPI, or no ompi_info beside this python")
    text = subprocess.run([ompi_info, "--param", "coll", "tuned", "--level", "9"],
                          capture_output=True, text=True, timeout=60).stdout
    block = text.split('"coll_tuned_allreduce_algorithm"', 1)[1]
    values = block.split("Valid values:", 1)[1].splitlines()[0]
    listed = dict(v.strip().split("|")[::-1] for v in values.split(","))
    assert {name: int(n) for name, n in listed.items() if name != "ignore"} == \
        T.OPENMPI_ALGORITHMS


def test_list_targets_names_the_librarys_algorithms_and_the_backends():
    proc = subprocess.run([sys.executable, "-m", "pyar", "verify", "--list-targets"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    family = T.library_family()
    lines = proc.stdout.splitlines()
    assert [x for x in lines if x.startswith("mpi:")] == [
        f"mpi:{a}" for a in T.mpi_algorithms(family)]
    assert {"torch:gloo", "torch:pyar", "pyar:ring", "pyar:auto"} <= set(lines)
    assert driver.expand_targets(["mpi:all"], family=family) == [
        f"mpi:{a}" for a in T.mpi_algorithms(family)]


def test_a_target_with_its_own_setting_gets_jobs_of_its_own():
    jobs = driver.Jobs(["mpiexec"], env={"A": "1"})
    shared, ring = jobs[2], jobs.job(2, "mpi:ring", {"V": "ring"})
    assert shared is jobs.job(2) and ring is jobs.of("mpi:ring", {"V": "ring"})[2]
    assert shared.env == {"A": "1"} and ring.env == {"A": "1", "V": "ring"}
    jobs.job(3, "mpi:ring", {"V": "ring"})
    jobs.stop(spec="mpi:ring")
    assert list(jobs.jobs) == [(2, None)]


def test_reproducers_set_the_algorithm_before_mpi_init():
    case = {**C.BASE, "dim": "counts", "count": 3}
    setting = {"MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    text = driver.reproducer("mpi:ring", 2, case, setting=setting)
    assert text.index("os.environ.update(") < text.index("from pyar")
    alone = standalone.script("mpi:ring", 2, case, setting=setting)
    assert alone.index("os.environ.update(") < alone.index("from mpi4py import MPI")
    assert "comm.Allreduce" in alone and "import pyar" not in alone
    compile(alone, "repro.py", "exec")
    compile(standalone.script("torch:gloo", 2, case), "repro.py", "exec")


def test_what_a_target_declines_is_unsupported_not_failed():
    report = driver.Report(["t"], [2], "smoke", [])
    for dtype, op in (("int16", "sum"), ("int16", "max"), ("uint16", "sum")):
        report.add("t", 2, {**C.BASE, "dtype": dtype, "op": op, "dim": "dtypes"},
                   {"verdict": "unsupported", "problems": [], "seconds": 0,
                    "unsupported": f"no {dtype}"})
    report.add("t", 2, {**C.BASE, "dim": "dtypes"}, {"verdict": "pass", "problems": [],
                                                      "seconds": 0})
    assert report and not report.failures
    assert report.verdicts()[0] == {"target": "t", "ranks": 2, "cases": 4, "unsupported": 3,
                                    "not_run": 0, "verdict": "passed"}
    assert "unsupported by t (NotImplementedError: not run, not failed): 3 cases, int16 " \
           "(sum max), uint16 (sum); it says: no int16 (and 1 more)" in report.text()


@pytest.mark.mpiexec
def test_mpich_forced_algorithms_run_and_reach_every_rank():
    """The setting changes what MPICH does: on 2 ranks its recursive doubling folds each
    rank's pair in its own order, so where zeros of both signs meet under MPI_MAX the ranks
    hold different zeros (MPI allows it: --nan mpi passes it); its ring gives one bit
    pattern."""
    if T.library_family() != "mpich":
        pytest.skip("MPICH's algorithms")
    report = check(["mpi:ring", "mpi:recursive_doubling"], ranks=[2], profile="smoke",
                   dims=["counts", "dtypes"], shrink=False, case_timeout=30)
    by = {v["target"]: v["verdict"] for v in report.verdicts()}
    assert by == {"mpi:ring": "passed", "mpi:recursive_doubling": "failed"}, report.text()
    assert report.failures and all(
        r["target"] == "mpi:recursive_doubling" and "(sign of zero only)" in r["problems"][0]
        for r in report.failures), report.text()
    assert {(d, o) for d, o in report.unsupported()["mpi:ring"]} == {
        ("float16", "sum"), ("float16", "max"), ("bfloat16", "sum"), ("bfloat16", "max")}


@pytest.mark.mpiexec
def test_a_forced_algorithm_without_its_setting_is_an_error_saying_what_to_set():
    """Every rank checks its setting arrived (MPICH or Open MPI): a job started without it
    (as a reproducer run by hand might be) cannot pass for the algorithm."""
    family = T.library_family()
    if not T.mpi_algorithms(family):
        pytest.skip("MPICH's and Open MPI's algorithms")
    wanted = " ".join(f"{k}={v}" for k, v in T.setting("mpi:ring", family).items())
    command, env = driver.default_mpiexec()
    job = driver.Job(2, command, env=env)
    try:
        result = job.run("mpi:ring", {**C.BASE, "dim": "counts", "count": 3}, 30)
    finally:
        job.stop()
    assert result["verdict"] == "error", result
    assert f"set {wanted} in the job's environment" in result["problems"][0]


@pytest.mark.mpiexec
def test_gloo_declines_int16_and_wide_unsigned_types_as_unsupported():
    pytest.importorskip("torch")
    report = check("torch:gloo", ranks=[1], profile="smoke", dims=["dtypes"], shrink=False,
                   case_timeout=30)
    assert report, report.text()
    declined = report.unsupported()["torch:gloo"]
    assert {d for d, _ in declined} == {"int16", "uint16", "uint32", "uint64"}
    assert all("Invalid scalar type" in why for _, why in declined.values())
    assert any(r["case"]["dtype"] == "uint8" and r["verdict"] == "pass"
               for r in report.results)
    assert "# unsupported by torch:gloo" in report.text()
