"""docs/algorithms.md is what scripts/algorithms_doc.py writes from the registry and the
simulator now, and it lists every registered algorithm of every collective."""

import re
import sys

from launch import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import algorithms_doc  # noqa: E402

from pyar import collectives  # noqa: E402
from pyar.algorithms import LIBRARY, algorithms  # noqa: E402

PAGE = ROOT / "docs" / "algorithms.md"


def test_the_page_is_current(tmp_path):
    out = tmp_path / "algorithms.md"
    assert algorithms_doc.main(["--out", str(out)]) == 0
    fresh, committed = out.read_text(), PAGE.read_text()
    if fresh != committed:
        changed = [f"  committed: {a}\n  generated: {b}" for a, b in
                   zip(committed.splitlines(), fresh.splitlines()) if a != b][:5]
        raise AssertionError(
            f"docs/algorithms.md is out of date: run `{algorithms_doc.COMMAND}` (python "
            f"scripts/algorithms_doc.py) and commit it; first differing lines:\n"
            + "\n".join(changed or ["  (one is a prefix of the other)"]))


def test_every_registered_algorithm_of_every_collective_has_a_row():
    page = PAGE.read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", page, re.M | re.S))
    for name in collectives.names():
        assert name in sections, f"docs/algorithms.md has no section for {name}"
        rows = set(re.findall(r"^\| `([\w:=,]+)` \|", sections[name], re.M))
        summaries = set(re.findall(r"^- `(\w+)`: ", sections[name], re.M))
        registered = set(algorithms(name)) - {LIBRARY}
        assert rows == registered, f"{name}: rows {sorted(rows)}, registered {sorted(registered)}"
        assert summaries == registered, f"{name}: summaries {sorted(summaries)}"


def test_the_page_names_its_buffer_and_cites_the_papers():
    page = PAGE.read_text()
    assert f"{algorithms_doc.RANKS} ranks each pass 262,144 float32 elements (1 MiB)" in page
    assert "## Comparisons researchers ask for" in page
    assert "NSDI 2024" in page and "SC 2025" in page and "33%" in page
