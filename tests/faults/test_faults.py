"""The fault suite: one rank misbehaves after some good calls (skips a call, calls collectives
in another order, sleeps past the timeout, passes another count, dtype, op or root, exits
early, is killed, raises under ``-m mpi4py``; sleeps, passes another count or leaves amid
large calls); every other rank must get a clear pyar error
within PYAR_TIMEOUT + 2 s, no call may return a wrong result, nothing may hang past the job's
timeout, and ``pyar doctor`` on the dumps must name the culprit (rank 2) and the call.
Each job: tests/faults/faults.py under mpiexec -n 3, bounded by ``timeout``."""

import json
import os
import time

import pytest

from launch import explain, run

from pyar.observe import doctor

pytestmark = pytest.mark.mpiexec        # (every test's job, some started by a fixture)
TIMEOUT = 1.0
NPROCS, CULPRIT = 3, 2
# scenario -> what pyar doctor must say (every piece must appear in its report)
VERDICTS = {
    "skip": ["control flow diverged at call #5: allreduce on ranks 0-1",
             "bcast on rank 2", "the odd one out: rank 2"],
    "order": ["control flow diverged at call #5: allreduce on ranks 0-1",
              "bcast on rank 2", "the odd one out: rank 2"],
    "sleep": ["the waits lead to rank 2"],
    "count": ["ranks disagree on allreduce #5: count 4 on ranks 0-1, count 5 on rank 2"],
    "dtype": ["ranks disagree on allreduce #5: dtype float32 on ranks 0-1, dtype int32 on "
              "rank 2"],
    "dtype64": ["ranks disagree on allreduce #5: dtype float32 on ranks 0-1, dtype float64 on "
                "rank 2"],
    "op": ["ranks disagree on allreduce #5: op sum on ranks 0-1, op max on rank 2"],
    "root": ["bcast #5", "rank 2"],
    "exit": ["rank 2 is missing: no dump", "the waits lead to rank 2"],
    "large_exit": ["rank 2 is missing: no dump", "the waits lead to rank 2"],
    "large_sleep": ["the waits lead to rank 2"],
    "large_count": ["ranks disagree on allreduce #6: count 262144 on ranks 0-1, count 262148 "
                    "on rank 2"],
}
# the calls whose other ranks may complete correctly (they needed nothing from the culprit)
MAY_COMPLETE = {"root"}
TIMES = {}                  # scenario -> seconds to the first error (printed at the end)


def rows_of(folder):
    return [json.loads(path.read_text()) for path in sorted(folder.glob("row*.json"))]


def check(name, folder, proc):
    rows = rows_of(folder / name)
    where = explain(proc)
    assert {r["rank"] for r in rows} >= set(range(NPROCS)) - ({CULPRIT} if name in GONE
                                                            else set()), where
    assert not any(r["wrong"] for r in rows), f"a wrong result came back silently: {rows}"
    errors = [r for r in rows if r["error"]]
    for row in rows:
        if row["rank"] == CULPRIT or name in MAY_COMPLETE and not row["error"]:
            continue
        assert row["error"] in ("TimeoutError", "MismatchError"), (row, where)
        assert row["seconds"] <= TIMEOUT + 2.0, row
    TIMES[name] = min(r["seconds"] for r in errors)
    report = "\n".join(doctor.diagnose(doctor.load(folder / name)))
    for piece in VERDICTS[name]:
        assert piece in report, f"{name}: {piece!r} not in the doctor's report:\n{report}"


GONE = {"exit", "large_exit"}      # the culprit leaves: a job of its own
ALIVE = [name for name in VERDICTS if name not in GONE]     # every rank lives on after it


@pytest.fixture(scope="module")
def alive(tmp_path_factory):
    """One job for the faults every rank survives, each on a communicator of its own (the
    failed call's notices drained before the next)."""
    folder = tmp_path_factory.mktemp("faults")
    proc = run(NPROCS, "tests/faults/faults.py", str(folder), *ALIVE, timeout=120,
               env={"PYAR_TIMEOUT": str(TIMEOUT)})
    return folder, proc


@pytest.mark.parametrize("name", ALIVE)
def test_a_misbehaving_rank_is_an_error_everywhere_and_the_doctor_names_it(name, alive):
    folder, proc = alive
    assert proc.returncode == 0, explain(proc)
    check(name, folder, proc)


def test_a_rank_exiting_early(tmp_path):
    proc = run(NPROCS, "tests/faults/faults.py", str(tmp_path), "exit", timeout=60,
               env={"PYAR_TIMEOUT": str(TIMEOUT)})
    # the rank that left runs MPI_Finalize, which can still be waiting for the others (who
    # never call it) when they exit: MPICH's launcher may then kill it in its C teardown;
    # the job ended all the same
    assert proc.returncode == 0 or (proc.returncode == 9 and "Killed (signal 9)" in
                                    proc.stdout + proc.stderr), explain(proc)
    check("exit", tmp_path, proc)


def test_a_rank_leaving_amid_large_calls_leaves_no_shared_memory_behind(tmp_path):
    """The culprit starts a large call (its messages offered from its memory: PYAR_CMA=1)
    and leaves; the others' call fails within the timeout, and once every rank has ended
    (MPI_Finalize) no file in /dev/shm that a rank mapped is left."""
    proc = run(NPROCS, "tests/faults/faults.py", str(tmp_path), "large_exit", timeout=60,
               env={"PYAR_TIMEOUT": str(TIMEOUT), "PYAR_CMA": "1"})
    assert proc.returncode == 0 or (proc.returncode == 9 and "Killed (signal 9)" in
                                    proc.stdout + proc.stderr), explain(proc)
    check("large_exit", tmp_path, proc)
    mapped = {path for row in rows_of(tmp_path / "large_exit") for path in row["shm"]}
    assert mapped, "no rank mapped a linked /dev/shm file: this check would prove nothing"
    left = [path for path in mapped if os.path.exists(path)]
    assert not left, f"left behind: {left}\n{explain(proc)}"


def test_a_killed_rank_ends_the_job_at_once(tmp_path):
    """MPICH's launcher kills the whole job when a rank dies (the survivors leave no dump)."""
    began = time.monotonic()
    proc = run(NPROCS, "tests/faults/faults.py", str(tmp_path), "kill", timeout=60,
               env={"PYAR_TIMEOUT": str(TIMEOUT)})
    assert proc.returncode != 0, explain(proc)
    assert "BAD TERMINATION" in proc.stdout + proc.stderr, explain(proc)
    assert time.monotonic() - began < 50, explain(proc)


def test_under_mpi4py_one_failing_rank_aborts_the_job_with_its_traceback(tmp_path):
    proc = run(NPROCS, "tests/faults/faults.py", str(tmp_path), "raise", timeout=60,
               env={"PYAR_TIMEOUT": str(TIMEOUT)})
    assert proc.returncode != 0, explain(proc)
    assert "Traceback" in proc.stderr and ("pyar.core.errors.TimeoutError" in proc.stderr or
                                           "pyar.core.errors.MismatchError" in proc.stderr), \
        explain(proc)
    # whichever rank raises first names call #5: the culprit in its own words ("allreduce #5
    # on rank 2 ..."), a rank that heard of the mismatch ("... as call #5 on this communicator")
    assert "allreduce #5" in proc.stderr or "as call #5" in proc.stderr, explain(proc)


def teardown_module():
    if TIMES:
        print("\nfault -> seconds to the first error: " +
              ", ".join(f"{k} {v:.2f}" for k, v in TIMES.items()))
