"""pyar checks itself with ``pyar verify``: every registered allreduce algorithm (and auto)
passes the smoke profile on 1, 3 and 4 ranks, in the MPI jobs the command starts itself. The
full sweep at 1..8 ranks is ``make verify``."""

import subprocess
import sys

import pytest

import pyar

pytestmark = pytest.mark.mpiexec        # (pyar verify starts the MPI jobs)


def test_every_pyar_allreduce_algorithm_passes_pyar_verify(tmp_path):
    out = tmp_path / "verify.json"
    proc = subprocess.run([sys.executable, "-m", "pyar", "verify", "pyar:all", "pyar:auto",
                           "--profile", "smoke", "--ranks", "1,3,4", "--case-timeout", "60",
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]
    import json

    data = json.loads(out.read_text())
    checked = {r["target"] for r in data["results"]}
    assert checked == {f"pyar:{a}" for a in pyar.algorithms() if a != "mpi"} | {"pyar:auto"}
    assert {r["ranks"] for r in data["results"]} == {1, 3, 4}
    assert all(r["verdict"] == "pass" for r in data["results"])
