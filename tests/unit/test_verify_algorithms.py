"""pyar checks itself with ``pyar verify``: every registered allreduce algorithm (and auto)
passes the smoke profile on 1, 3 and 4 ranks, in the MPI jobs the command starts itself,
but for one known defect: pyar folds float16 and bfloat16 in the half type (each fold
rounded to it), so its sums and averages overflow to inf where the exact result, and a
float32 accumulation, is finite; ``pyar verify`` requires float32 accumulation and says so.
The full sweep is ``pyar verify pyar:all pyar:auto --profile full --ranks 1-8``."""

import json
import subprocess
import sys

import pytest

import pyar

pytestmark = pytest.mark.mpiexec        # (pyar verify starts the MPI jobs)


def half_sum(case) -> bool:
    """A case where half-type accumulation overflows (the known defect's cases)."""
    return case["dtype"] in ("float16", "bfloat16") and case["op"] in ("sum", "avg") \
        and case["values"] in ("halfmax", "halfcancel")


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
    wrong = [r for r in data["results"] if r["verdict"] != "pass" and not half_sum(r["case"])]
    assert not wrong, proc.stdout[-6000:]


@pytest.mark.xfail(strict=True, reason="pyar folds float16/bfloat16 in the half type: partial "
                   "sums overflow where float32's would not")
def test_pyar_accumulates_half_types_in_float32(verified):
    proc, data = verified
    half = [r for r in data["results"] if half_sum(r["case"])]
    assert half and all(r["verdict"] == "pass" for r in half), proc.stdout[-3000:]
