"""docs/algorithms.md is what scripts/algorithms_doc.py writes from the registry and the
simulator now, and it lists every registered algorithm of every collective.

Both run in a fresh process, as ``make algorithms-doc`` does: the registry of this one may
hold what other tests registered."""

import json
import os
import re
import subprocess
import sys

from launch import ROOT

SCRIPT = ROOT / "scripts" / "algorithms_doc.py"
PAGE = ROOT / "docs" / "algorithms.md"
COMMAND = "make algorithms-doc"
REGISTRY = ("import json; from pyar import collectives; from pyar.algorithms import algorithms; "
            "print(json.dumps({c: algorithms(c) for c in collectives.names()}))")


def python(*args: str) -> str:
    proc = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


def test_the_page_is_current(tmp_path):
    out = tmp_path / "algorithms.md"
    python(str(SCRIPT), "--out", str(out))
    fresh, committed = out.read_text(), PAGE.read_text()
    if fresh != committed:
        changed = [f"  committed: {a}\n  generated: {b}" for a, b in
                   zip(committed.splitlines(), fresh.splitlines()) if a != b][:5]
        raise AssertionError(
            f"docs/algorithms.md is out of date: run `{COMMAND}` (python "
            f"scripts/algorithms_doc.py) and commit it; first differing lines:\n"
            + "\n".join(changed or ["  (one is a prefix of the other)"]))


def test_every_registered_algorithm_of_every_collective_has_a_row_and_a_summary():
    page = PAGE.read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    for name, registered in json.loads(python("-c", REGISTRY)).items():
        assert name in sections, f"docs/algorithms.md has no section for {name}: run `{COMMAND}`"
        registered = set(registered) - {"mpi"}
        rows = set(re.findall(r"^\| `(\w+)` \|", sections[name], re.M))
        summaries = set(re.findall(r"^- `(\w+)`: ", sections[name], re.M))
        assert rows == registered, (f"{name}: rows {sorted(rows)}, registered "
                                    f"{sorted(registered)}: run `{COMMAND}`")
        assert summaries == registered, f"{name}: summaries {sorted(summaries)}"


def test_the_page_states_its_buffer_and_cites_the_papers():
    page = PAGE.read_text()
    assert "64 ranks each pass 262,144 float32 elements (1 MiB)" in page
    assert "## Comparisons researchers ask for" in page
    assert "NSDI 2024" in page and "SC 2025" in page and "33%" in page
