"""``pyar verify`` pointed at deliberately broken allreduces (tests/verify_targets/broken.py,
each wrong under one condition) finds each, shrinks it to a small case whose reproducer
reproduces it, reports a hang within --case-timeout as its rank count's verdict and goes on
with the other targets and rank counts; the correct ones (correct.py, and MPI_Allreduce
itself under --nan mpi) pass with no false alarm. Real MPI jobs, started by
pyar.verify.check itself."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyar.verify import cases as C, check

pytestmark = pytest.mark.mpiexec        # (pyar.verify.check starts the MPI jobs)
HERE = Path(__file__).parents[1] / "verify_targets"
BROKEN = HERE / "broken.py"
CASE_TIMEOUT = 5
# target -> (the dimension its bug lives in, what the report must say, largest count the
# shrunk case may keep)
BUGS = {"segment_tail": ("counts", "elements wrong", 16385),
        "reshape_inplace": ("layouts", "elements wrong", 16),
        "half_wire": ("dtypes", "elements wrong", 16),
        "stale": ("repeat", "elements wrong", 1031),
        "shared_tag": ("interleave", "", 1031),
        "via_float64": ("values", "elements wrong", 16),
        "fmax": ("values", "elements wrong", 16),
        "scratch_in_x": ("modes", "x was modified", 16),
        "half_accumulate": ("values", "must be accumulated in float32", 16)}


@pytest.fixture(scope="module")
def broken():
    started = time.monotonic()
    report = check([f"{BROKEN}:{name}" for name in ["hang_empty", *BUGS]], ranks=[2],
                   profile="smoke", case_timeout=CASE_TIMEOUT, confirm=False, shrink_examples=30)
    return report, time.monotonic() - started


def _of(report, name):
    return [r for r in report.results if r["target"].endswith(":" + name)]


@pytest.mark.parametrize("name", list(BUGS))
def test_each_bug_is_found_where_it_lives_and_nowhere_it_does_not(broken, name):
    report, _ = broken
    dim, words, _ = BUGS[name]
    results = _of(report, name)
    failed = [r for r in results if r["verdict"] != "pass"]
    assert any(r["case"]["dim"] == dim for r in failed), \
        f"{name}: no failure in {dim}\n{report.text()}"
    assert all(words in " ".join(r["problems"]) for r in failed if r["verdict"] == "fail")
    assert any(r["verdict"] == "pass" for r in results), f"{name} failed every case"
    assert not report, "a broken target passed"


@pytest.mark.parametrize("name", list(BUGS))
def test_each_bug_shrinks_to_a_small_case_whose_reproducer_reproduces_it(broken, name,
                                                                         tmp_path):
    report, _ = broken
    small = [r["smallest"] for r in _of(report, name) if r.get("smallest")]
    assert small, f"{name}: nothing shrunk\n{report.text()}"
    first = small[0]
    assert first["case"]["count"] <= BUGS[name][2], first
    assert first["ranks"] <= 2
    script = tmp_path / "repro.py"
    script.write_text(first["script"])
    line = first["script"].splitlines()[0]
    assert line.startswith("# timeout -k 5 ") and f"mpiexec -n {first['ranks']} python" in line
    mpiexec = Path(sys.executable).with_name("mpiexec")
    proc = subprocess.run(["timeout", "-k", "5", "60", str(mpiexec), "-n", str(first["ranks"]),
                           sys.executable, str(script)], capture_output=True, text=True,
                          timeout=90, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert ": fail" in proc.stdout


def test_a_hang_is_its_rank_counts_verdict_and_the_other_targets_go_on(broken):
    report, _ = broken
    results = _of(report, "hang_empty")
    assert [r["verdict"] for r in results][-1] == "hang", report.text()
    assert all(r["verdict"] == "pass" for r in results[:-1])
    hung = results[-1]
    assert hung["case"]["count"] == 0 and hung["seconds"] <= CASE_TIMEOUT + 5, hung
    (verdict,) = [v for v in report.verdicts() if v["target"].endswith(":hang_empty")]
    assert verdict["verdict"] == "hangs" and verdict["case"] == hung["case"]
    assert verdict["cases"] + verdict["not_run"] == len(C.sweep(2, "smoke"))
    assert f"hang: {BROKEN}:hang_empty on 2 ranks, count=0" in report.text()
    assert all(_of(report, name) for name in BUGS)      # run after it, on the same rank count


def test_a_deadlock_at_one_rank_count_is_reported_at_its_case_timeout_and_the_others_judged_fully(
        tmp_path):
    out = tmp_path / "v.json"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pyar", "verify", f"{BROKEN}:deadlock_at_3", "--ranks", "1-5",
         "--case-timeout", "10", "--json", str(out)], capture_output=True, text=True, timeout=400)
    seconds = time.monotonic() - started
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert seconds < 180, f"{seconds:.0f} s\n{proc.stdout}"
    data = json.loads(out.read_text())
    verdicts = {v["ranks"]: v for v in data["verdicts"]}
    assert verdicts[3]["verdict"] == "hangs" and verdicts[3]["cases"] == 1, verdicts[3]
    assert verdicts[3]["not_run"] == len(C.sweep(3, data["profile"])) - 1
    for size in (1, 2, 4, 5):
        assert verdicts[size]["verdict"] == "passed" and verdicts[size]["not_run"] == 0
        assert verdicts[size]["cases"] == len(C.sweep(size, data["profile"]))
    assert "3 hangs" in proc.stdout and "hangs on 3 ranks at counts: count=0" in proc.stdout


def test_the_time_limit_bounds_the_run_and_says_what_it_did_not_reach(tmp_path):
    out = tmp_path / "v.json"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "pyar", "verify", f"{HERE / 'correct.py'}:ring", "--ranks", "1-3",
         "--profile", "full", "--time-limit", "5", "--json", str(out)],
        capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - started
    assert proc.returncode == 1 and "INCOMPLETE" in proc.stdout, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["seconds"] < 5 + 10, data["seconds"]        # a job's end, at most, past it
    reached = sum(v["cases"] for v in data["verdicts"])
    missed = sum(s["cases"] for s in data["not_run"])
    assert reached + missed == sum(len(C.sweep(n, data["profile"])) for n in (1, 2, 3))
    assert missed and all(s["why"] == "time-limit" for s in data["not_run"])
    assert "not reached within --time-limit 5 s" in proc.stdout
    assert seconds < 60


def test_mpi_allreduce_passes_under_the_mpi_nan_rule_and_is_told_the_rule_it_breaks():
    assert (report := check("mpi", ranks="1-5", nan="mpi")), report.text()
    strict = check("mpi", ranks=[2, 3, 4], dims=["values"], shrink=False)
    nan_failures = [r for r in strict.failures if "NaN" in " ".join(r["problems"])
                    or "differ bitwise" in " ".join(r["problems"])]
    assert nan_failures, "MPICH's max/min came out NaN-propagating and rank-identical"
    assert all("--nan mpi" in " ".join(r["problems"]) for r in nan_failures), strict.text()
    assert all(r["case"]["op"] in ("max", "min") for r in strict.failures), strict.text()


def test_the_correct_implementations_pass_with_no_false_alarm():
    report = check([f"{HERE / 'correct.py'}:ring", f"{HERE / 'correct.py'}:mpi_nan"],
                   ranks=[1, 3], profile="smoke", case_timeout=30)
    assert report, report.text()
    skipped = {r["case"]["dtype"] for r in report.results if r["verdict"] == "unsupported"}
    assert skipped == {"float16", "bfloat16"}      # MPI has neither: mpi_nan says so


def test_the_command_exits_1_on_a_failure_and_writes_json(tmp_path):
    out = tmp_path / "v.json"
    proc = subprocess.run(
        [sys.executable, "-m", "pyar", "verify", f"{BROKEN}:fmax", "--ranks", "2",
         "--profile", "smoke", "--dims", "values", "--json", str(out), "--no-shrink",
         "--repro-dir", str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert not data["passed"] and data["ranks"] == [2]
    assert any(r["verdict"] == "fail" and r["case"]["op"] == "max" for r in data["results"])
    assert "values" in proc.stdout and "FAILED" in proc.stdout


def test_the_command_says_what_it_expected(capsys):
    from pyar import cli

    for args, words in ((["mpi", "--ranks", "0"], "rank counts >= 1"),
                        (["mpi", "--dims", "colours"], "unknown dimension"),
                        (["mpi", "--case-timeout", "0"], "--case-timeout must be > 0"),
                        (["mpi", "--time-limit", "-1"], "--time-limit must be > 0"),
                        (["mpi", "--nan", "ieee"], "invalid choice: 'ieee'")):
        with pytest.raises(SystemExit) as e:
            cli.main(["verify", *args])
        assert e.value.code == 2 and words in capsys.readouterr().err
    proc = subprocess.run([sys.executable, "-m", "pyar", "verify", "nosuchmodule:fn",
                           "--ranks", "1", "--profile", "smoke", "--dims", "modes",
                           "--no-shrink"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no module named 'nosuchmodule'" in proc.stdout


def test_a_run_as_root_with_more_ranks_than_cores_starts_through_the_projects_launcher(
        tmp_path, monkeypatch):
    """The default mpiexec gets what its library needs: here a stand-in Open MPI mpiexec
    that refuses, as Open MPI does, more ranks than cores without --oversubscribe and root
    without its two variables, and otherwise runs the job through pyar/runtime/launch.py."""
    import os

    launcher = Path(__file__).parents[2] / "pyar" / "runtime" / "launch.py"
    fake = tmp_path / "mpiexec"
    fake.write_text(
        "#!/bin/sh\n"
        "[ \"$1\" = --version ] && { echo 'mpiexec (Open MPI) 5.0.11'; exit 0; }\n"
        "[ \"$1\" = --oversubscribe ] || { echo 'not enough slots available' >&2; exit 1; }\n"
        "[ \"$(id -u)\" != 0 ] || [ \"$OMPI_ALLOW_RUN_AS_ROOT$OMPI_ALLOW_RUN_AS_ROOT_CONFIRM\" "
        "= 11 ] || { echo 'prterun has detected an attempt to run as root' >&2; exit 1; }\n"
        f"shift; MPIEXEC= exec {sys.executable} {launcher} \"$@\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("MPIEXEC", str(fake))
    ranks = len(os.sched_getaffinity(0)) + 1
    report = check(f"{HERE / 'correct.py'}:ring", ranks=[ranks], profile="smoke",
                   dims=["modes"], case_timeout=30)
    assert report, report.text()
    refused = check(f"{HERE / 'correct.py'}:ring", ranks=[ranks], profile="smoke",
                    dims=["modes"], mpiexec=str(fake), shrink=False)     # as given: refused
    assert {r["verdict"] for r in refused.results} == {"crash"}, refused.text()
    assert "not enough slots" in refused.text()


LIBRARIES = HERE / "libraries.py"


def test_saturating_sums_are_reported_as_saturation_and_uint8s_as_a_deviation_from_c():
    """Open MPI's vector path, emulated: int8 and uint8 sums saturate. Under --int-overflow
    wrap both fail as saturation; under any, int8 passes (C leaves signed overflow undefined)
    and uint8 fails as a deviation from C; nothing else fails."""
    for rule, failing in (("wrap", {"int8", "uint8"}), ("any", {"uint8"})):
        report = check(f"{LIBRARIES}:saturating", ranks=[2], profile="quick", dims=["dtypes"],
                       shrink=False, int_overflow=rule)
        failed = {r["case"]["dtype"]: " ".join(r["problems"]) for r in report.failures}
        assert set(failed) == failing, report.text()
        assert all(r["case"]["op"] == "sum" for r in report.failures)
        assert "saturate" in failed["uint8"] and "a deviation from C" in failed["uint8"]
        if rule == "wrap":
            assert "saturate" in failed["int8"] and "--int-overflow any accepts" in failed["int8"]
        assert f"--int-overflow {rule}" in report.text()


def test_a_nan_payload_disagreement_fails_under_pyars_rule_and_passes_under_mpis():
    """MPICH's recursive doubling, emulated: ranks' NaNs differ in payload only."""
    strict = check(f"{LIBRARIES}:nan_payload", ranks=[3], profile="smoke", dims=["values"],
                   shrink=False)
    assert strict.failures and all(r["case"]["values"] == "special" for r in strict.failures)
    for r in strict.failures:
        text = " ".join(r["problems"])
        assert "differ bitwise" in text and "(NaN payload only)" in text, text
        assert "rank 1 0x" in text and "--nan mpi accepts this" in text, text
    loose = check(f"{LIBRARIES}:nan_payload", ranks=[3], profile="smoke", dims=["values"],
                  shrink=False, nan="mpi")
    assert loose, loose.text()


def _run_standalone(script, ranks, tmp_path, name):
    """Run a standalone reproducer with pyar made unimportable: (exit status, output)."""
    path = tmp_path / name
    path.write_text(script)
    mpiexec = Path(sys.executable).with_name("mpiexec")
    no_pyar = f"import sys; sys.modules['pyar'] = None; sys.argv = [{str(path)!r}]; " \
              f"exec(compile(open({str(path)!r}).read(), {str(path)!r}, 'exec'))"
    proc = subprocess.run(["timeout", "-k", "5", "60", str(mpiexec), "-n", str(ranks),
                           sys.executable, "-c", no_pyar], capture_output=True, text=True,
                          timeout=90, cwd=tmp_path)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("name", list(BUGS))
def test_each_shrunk_case_is_a_standalone_script_that_fails_without_pyar_and_passes_the_ring(
        broken, name, tmp_path):
    from pyar.verify import standalone

    report, _ = broken
    (first, *_) = [r["smallest"] for r in _of(report, name) if r.get("smallest")]
    assert "pyar" not in "".join(line for line in first["standalone"].splitlines()
                                 if line.startswith(("import", "from")))
    rc, out = _run_standalone(first["standalone"], first["ranks"], tmp_path, "bug.py")
    assert rc == 1 and "rank " in out, out
    ring = standalone.script(f"{HERE / 'correct.py'}:ring", first["ranks"], first["case"])
    rc, out = _run_standalone(ring, first["ranks"], tmp_path, "ring.py")
    assert rc == 0, out


def test_a_send_buffer_reused_before_its_send_completes_is_caught_at_large_counts(tmp_path):
    """Both races of broken.py (a staging buffer refilled before its Isend is waited for; x
    sent and left in flight at return) fail the races dimension at 3 ranks, and no other at
    smoke's counts; the correct targets and MPI_Allreduce pass it at 1 and 3 ranks (no false
    alarm). The first race's standalone reproducer fails, and passes on the ring. (At 2
    ranks a rank's left and right neighbours are one rank, late or not: the staging race
    shows by chance there.)"""
    from pyar.verify import standalone

    broken = [f"{BROKEN}:reused_send", f"{BROKEN}:unwaited_send"]
    correct = [f"{HERE / 'correct.py'}:ring", f"{HERE / 'correct.py'}:mpi_nan", "mpi"]
    report = check(broken + correct, ranks=[1, 3], profile="quick", dims=["races"],
                   shrink=False, nan="mpi")
    verdicts = {(v["target"], v["ranks"]): v["verdict"] for v in report.verdicts()}
    for target in broken:
        assert verdicts[target, 3] == "failed", report.text()
        assert verdicts[target, 1] == "passed", report.text()
    assert all(verdicts[t, n] == "passed" for t in correct for n in (1, 3)), report.text()
    counts = {r["case"]["count"] for r in report.failures}
    assert counts == {(1 << 20) // 4 + 1, (64 << 10) // 4 + 1}, report.text()
    quiet = check(broken, ranks=[3], profile="smoke", dims=["counts", "repeat"],
                  shrink=False)
    assert quiet, "found without the races dimension:\n" + quiet.text()
    (race, *_) = [r for r in report.failures if r["target"] == broken[0]]
    script = standalone.script(broken[0], 3, race["case"])
    assert _run_standalone(script, 3, tmp_path, "race.py")[0] == 1
    script = standalone.script(correct[0], 3, race["case"])
    assert _run_standalone(script, 3, tmp_path, "ring.py")[0] == 0


def test_reproducible_sums_are_held_to_the_same_bits_across_rank_orders_counts_and_splits(
        tmp_path):
    """--reproducible: pyar's algorithms (PYAR_REPRODUCIBLE=1) and a correctly rounded sum
    pass the reproducible dimension at 1 and 3 ranks, pyar's giving the same bits as each
    other in every case (the report compares the targets' bits); the correct but
    order-dependent ring fails it at 3 ranks, saying which reordering gave other bits, and
    passes at 1; pyar's default sums fail it at 3 ranks. The ring's shrunk standalone
    reproducer fails, and passes on the correctly rounded sum."""
    from pyar.verify import standalone

    ring, exact = f"{HERE / 'correct.py'}:ring", f"{HERE / 'correct.py'}:exact_sum"
    report = check([ring, exact, "pyar:ring", "pyar:rabenseifner"], ranks=[1, 3],
                   profile="quick", dims=["reproducible"], reproducible=True,
                   shrink_examples=10, confirm=False)
    verdicts = {(v["target"], v["ranks"]): v["verdict"] for v in report.verdicts()}
    assert verdicts[ring, 3] == "failed" and verdicts[ring, 1] == "passed", report.text()
    assert all(verdicts[t, n] == "passed" for t in (exact, "pyar:ring", "pyar:rabenseifner")
               for n in (1, 3)), report.text()
    problems = " ".join(p for r in report.failures for p in r["problems"])
    assert "not reproducible" in problems and "the ranks reversed" in problems, report.text()
    assert "--reproducible" in report.text().splitlines()[0]
    pyars = {"pyar:ring", "pyar:rabenseifner"}           # the same bits as each other
    assert all(any(pyars <= set(g) for g in u["groups"]) for u in report.unlike), report.text()
    assert any("digest" in r for r in report.results if r["target"] == "pyar:ring")
    default = check(["pyar:ring"], ranks=[3], profile="quick", dims=["reproducible"],
                    shrink=False)
    assert not default and "not reproducible" in default.text(), default.text()
    (first, *_) = [r["smallest"] for r in report.results if r.get("smallest")]
    rc, out = _run_standalone(first["standalone"], first["ranks"], tmp_path, "ring.py")
    assert rc == 1 and "not reproducible" in out, out
    script = standalone.script(exact, first["ranks"], first["case"])
    rc, out = _run_standalone(script, first["ranks"], tmp_path, "exact.py")
    assert rc == 0, out
