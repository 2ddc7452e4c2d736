"""pyar checks itself with ``pyar verify``: every registered allreduce algorithm (and auto)
passes the smoke profile on 1, 3 and 4 ranks (4 in ``make test-all`` only), in the MPI jobs
the command starts itself, the half-type cases included (float16 and bfloat16 sums accumulate in float32, which
``pyar verify`` requires). The full sweep is
``pyar verify pyar:all pyar:auto --profile full --ranks 1-8``."""

import json
import subprocess
import sys

import pytest

import pyar
from pyar.verify.driver import parse_ranks

pytestmark = pytest.mark.mpiexec        # (pyar verify starts the MPI jobs)
# make test checks 1 and 3 ranks (the degenerate job and a ring of odd length: every
# algorithm's general path); make test-all adds 4, the power of two on which the
# pof2 algorithms take their own path (4 ranks share 2 cores here: the costliest part)
RANKS = ["1,3", pytest.param("4", marks=pytest.mark.full)]


@pytest.fixture(scope="module", params=RANKS)
def verified(request, tmp_path_factory):
    out = tmp_path_factory.mktemp("verify") / "verify.json"
    proc = subprocess.run([sys.executable, "-m", "pyar", "verify", "pyar:all", "pyar:auto",
                           "--profile", "smoke", "--ranks", request.param, "--case-timeout",
                           "60", "--no-shrink", "--json", str(out)], capture_output=True,
                          text=True, timeout=900)
    assert out.exists(), proc.stdout[-6000:] + proc.stderr[-3000:]
    return request.param, proc, json.loads(out.read_text())


def test_every_pyar_allreduce_algorithm_passes_pyar_verify(verified):
    ranks, proc, data = verified
    checked = {r["target"] for r in data["results"]}
    assert checked == {f"pyar:{a}" for a in pyar.algorithms() if a != "mpi"} | {"pyar:auto"}
    assert {r["ranks"] for r in data["results"]} == set(parse_ranks(ranks)) \
        and not data["not_run"]
    assert any(r["case"]["values"] == "halfcancel" for r in data["results"])
    wrong = [r for r in data["results"] if r["verdict"] != "pass"]
    assert not wrong, proc.stdout[-6000:]
