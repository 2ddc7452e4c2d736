"""scripts/verify_report.py writes docs/verify-report.md from runs' JSON: per library a
header naming it and the options, a row per target, and per target its counts by rank count,
what it declines, its deviations by class and each shrunk failure's standalone reproducer
(never run by the docs test)."""

import json
import re
import sys

from launch import ROOT

from pyar.verify import cases as C, driver

sys.path.insert(0, str(ROOT / "scripts"))
import verify_report  # noqa: E402


def fake_run(where, library):
    report = driver.Report(["mpi:ring"], [2], "quick", [])
    case = {**C.BASE, "dim": "dtypes", "dtype": "uint8", "count": 37}
    problem = ("call 0: 16 of 37 elements wrong: [0] got 255 from (232, 40) [of 18 elements "
               "whose sum overflows uint8 in some order, 16 saturate, 2 wrap: C's unsigned "
               "arithmetic wraps (modulo 2**8)]")
    report.add("mpi:ring", 2, case, {"verdict": "fail", "problems": [problem], "seconds": 0})
    report.add("mpi:ring", 2, {**case, "dtype": "float16"},
               {"verdict": "unsupported", "problems": [], "seconds": 0,
                "unsupported": "MPI has no float16 or bfloat16"})
    report.add("mpi:ring", 2, {**case, "dtype": "int32"},
               {"verdict": "pass", "problems": [], "seconds": 0})
    report.results[0]["smallest"] = {"ranks": 2, "case": {**case, "count": 1},
                                     "problems": [problem], "note": "smallest found",
                                     "confirmed": True}
    report.name_reproducers(60, {"mpi:ring": {"V": "ring"}})
    where.mkdir()
    (where / "00-mpi_ring.json").write_text(json.dumps(report.to_json()))
    (where / "run.json").write_text(json.dumps(
        {"mpi": library, "torch": None, "ranks": "2", "profile": "quick", "nan": "propagate",
         "int_overflow": "wrap", "time_limit": 600, "files": ["00-mpi_ring.json"]}))


def test_the_page_says_what_each_target_gave_and_holds_its_reproducers(tmp_path):
    fake_run(tmp_path / "mpich", "MPICH Version: 5.0.2")
    fake_run(tmp_path / "openmpi", "Open MPI v5.0.11, package: Open MPI")
    page = tmp_path / "page.md"
    verify_report.main(["write", "--out", str(tmp_path / "mpich"), "--out",
                        str(tmp_path / "openmpi"), "--markdown", str(page)])
    text = page.read_text()
    assert "## MPICH 5.0.2" in text and "## Open MPI 5.0.11" in text
    assert "with MPICH 5.0.2, on ranks 2, profile quick" in text
    assert "with Open MPI 5.0.11, on ranks 2" in text and "package" not in text
    assert "| [mpi:ring](#mpich-502-mpiring) | 3 | 1 | 1 | 1 | 0 | 2 failed |" in text
    assert "### MPICH 5.0.2: mpi:ring" in text and "| 2 | 1 | 1 | 1 | 0 | 0 | 0 | 0 | failed |" \
        in text
    assert "not run, not failed): 1 cases, float16 (sum). It says: `MPI has no float16 or " \
           "bfloat16`." in text
    assert "- uint8 sum overflow saturates: C's unsigned arithmetic wraps (modulo 2**8): 1 " \
           "cases (ranks 2)" in text
    fences = re.findall(r"<!-- skip: [^>]+ -->\n```python\n(.*?)```", text, re.S)
    assert len(fences) == 2 and all("os.environ.update({'V': 'ring'})" in f for f in fences)
    for f in fences:
        compile(f, "repro.py", "exec")
