"""`make examples` runs every example as its first line says, and they all succeed."""

import subprocess
import sys
from pathlib import Path

from launch import ROOT


def test_make_examples():
    venv = Path(sys.executable).parent.parent
    proc = subprocess.run(["make", "examples", f"VENV={venv}"], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert proc.stdout.count("[[10.0, 10.0, 10.0], [10.0, 10.0, 10.0]]") == 4
    assert proc.stdout.count("pipelined_chain over MPI matches MPI_Allreduce") == 4


def test_every_example_starts_with_its_mpiexec_line():
    for path in sorted((ROOT / "examples").glob("*.py")):
        first = path.read_text().splitlines()[0]
        assert first.startswith("# mpiexec -n ") and path.name in first, path
