"""pyar checks itself with ``pyar verify``: every registered allreduce algorithm (and auto)
passes the smoke profile on 1, 3 and 4 ranks, in the MPI jobs the command starts itself,
the half-type cases included (float16 and bfloat16 sums accumulate in float32, which
``pyar verify`` requires). The full sweep is
``pyar verify pyar:all pyar:auto --profile full --ranks 1-8``."""

import json
import subprocess
import sys

import pytest

import pyar

pytestmark = pytest.mark.mpiexec        # (pyar verify starts the MPI jobs)


@pytest.fixture(scope="module")
def verified(tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "verify.json"
    proc = subprocess.run([sys.executable, "-m", "pyar", "verify", "pyar:all", "pyar:auto",
                           "--profile", "smoke", "--ranks", "1,3,4", "--case-timeout", "60",
                           "--no-shrink", "--json", str(out)], capture_output=True, text=True,
                          timeout=900)
    assert out.exists(), proc.stdout[-6000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def test_every_pyar_allreduce_algorithm_passes_pyar_verify(verified):
    proc, data = verified
    checked = {r["target"] for r in data["results"]}
    assert checked == {f"pyar:{a}" for a in pyar.algorithms() if a != "mpi"} | {"pyar:auto"}
    assert {r["ranks"] for r in data["results"]} == {1, 3, 4} and not data["not_run"]
    assert any(r["case"]["values"] == "halfcancel" for r in data["results"])
    wrong = [r for r in data["results"] if r["verdict"] != "pass"]
    assert not wrong, proc.stdout[-6000:]
