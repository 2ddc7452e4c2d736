"""Docs that run: the documentation site builds strict, and every command and Python block of
README.md and docs/ runs, so that none can rot.

How a fenced block is run (a marker is an HTML comment on the line just above its fence):

- ``python``: in a fresh process, as one rank; a first line ``# mpiexec -n N python -m
  mpi4py FILE`` runs it under mpiexec on N ranks instead, and where FILE is in the
  repository, each of the block's code lines must be one of FILE's (the block shows it);
  else the block is written to FILE and run as FILE.
  A first line ``# file: NAME`` writes the block to NAME for the blocks after it, or where
  NAME is a file of the repository, shows it: each of the block's lines must be one of its.
- ``sh``: as a bash script (``set -e``: a failing command fails it, a pipeline its last), where ``pyar``, ``python`` and ``mpiexec`` are this
  venv's (mpiexec through pyar/runtime/launch.py) and ``make`` only says what it would do
  (``make -n``): a target that is gone fails.
- ``<!-- output -->`` above a block: each of its lines is a line of what the run block
  before it printed (in any order: ranks print in any order).
- ``<!-- skip: REASON -->``: not run (it installs something, needs a cluster, or only lists
  signatures); the reason is required.

The blocks of one page run in order in one scratch directory (files made by one are there
for the next), with examples/, machines/, pyar/ and tests/ of the repository beside them; each
block is bounded by a timeout.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

from launch import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUN = {"python", "sh"}
BLOCK_TIMEOUT = 180
MARKER = re.compile(r"^<!--\s*(output|skip:\s*\S.*?)\s*-->$")


class Block(NamedTuple):
    lang: str
    text: str
    marker: str
    line: int


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page, with the marker above each."""
    found, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\w*)", lines[i])
        if fence:
            indent, start = fence.group(1), i
            i += 1
            body = []
            while not lines[i].strip().startswith("```"):
                body.append(lines[i][len(indent):])
                i += 1
            above = lines[start - 1].strip() if start else ""
            marker = MARKER.match(above)
            found.append(Block(fence.group(2), "\n".join(body) + "\n",
                               marker.group(1) if marker else "", start + 1))
        i += 1
    return found


def shims(where: Path) -> dict:
    """A bin directory of this venv's pyar, python and mpiexec, and a make that only says
    what it would do; the environment that puts them first."""
    bin_ = where / "bin"
    bin_.mkdir()
    venv = Path(sys.executable).parent.parent
    launch = ROOT / "pyar" / "runtime" / "launch.py"
    for name, line in {
            "pyar": f'exec "{sys.executable}" -m pyar "$@"',
            "python": f'exec "{sys.executable}" "$@"',
            "mpiexec": f'exec timeout -k 10 {BLOCK_TIMEOUT} "{sys.executable}" "{launch}" "$@"',
            "make": f'exec "{shutil.which("make")}" -n -C "{ROOT}" VENV="{venv}" "$@"'}.items():
        (bin_ / name).write_text(f"#!/bin/bash\n{line}\n")
        (bin_ / name).chmod(0o755)
    return {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT),
            "MPLBACKEND": "Agg", "PYAR_DUMP_DIR": str(where / "dumps")}


def run_block(block: Block, cwd: Path, env: dict, where: str) -> str:
    """Run one block in ``cwd``; its stdout (AssertionError with its output if it fails)."""
    first = block.text.split("\n", 1)[0]
    if block.lang == "python":
        mpi = re.match(r"#\s*mpiexec -n (\d+) python -m mpi4py (\S+)", first)
        if mpi:
            shown = ROOT / mpi.group(2)
            if shown.is_file():
                theirs = {line.strip() for line in shown.read_text().splitlines()}
                for line in block.text.splitlines()[1:]:
                    assert not line.strip() or line.strip() in theirs, \
                        f"{where}: {line.strip()!r} is not in {mpi.group(2)}"
            # the file it names (its errors name it), unless that is the repository's own
            script = cwd / (f"block{block.line}.py" if shown.is_file() else mpi.group(2))
            script.write_text(block.text)
            command = ["mpiexec", "-n", mpi.group(1), "python", "-m", "mpi4py", script.name]
        else:
            script = cwd / f"block{block.line}.py"
            script.write_text(block.text)
            command = ["python", script.name]
    else:
        command = ["bash", "-e", "-c", block.text]
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=BLOCK_TIMEOUT + 30)
    assert proc.returncode == 0, (f"{where} exited {proc.returncode}\n--- block ---\n"
                                  f"{block.text}--- stdout ---\n{proc.stdout[-4000:]}\n"
                                  f"--- stderr ---\n{proc.stderr[-4000:]}")
    return proc.stdout


def test_every_block_is_run_shown_or_skipped_for_a_reason():
    for page in PAGES:
        for block in blocks(page):
            where = f"{page.relative_to(ROOT)}:{block.line}"
            if block.marker == "output":
                assert block.lang in ("", "text"), f"{where}: output is a text block"
            if block.lang in ("bash", "console", "shell", "py", "python3", "pycon"):
                pytest.fail(f"{where}: write ```sh or ```python (these run), or ```text")


@pytest.mark.mpiexec
@pytest.mark.parametrize("page", [p for p in PAGES if any(
    b.lang in RUN and not b.marker.startswith("skip") for b in blocks(p))],
    ids=lambda p: str(p.relative_to(ROOT)))
def test_the_blocks_of_the_page_run(page, tmp_path):
    for name in ("examples", "machines", "pyar", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    env = shims(tmp_path)
    last = None
    for block in blocks(page):
        where = f"{page.relative_to(ROOT)}:{block.line}"
        if block.marker == "output":
            assert last is not None, f"{where}: output of no block"
            got = {line.rstrip() for line in last.splitlines()}   # (ranks print at once:
            missing = [line for line in block.text.splitlines()     # lines may interleave)
                       if line.rstrip() not in got and line.rstrip() not in last]
            assert not missing, f"{where}: not printed: {missing}\n--- printed ---\n{last}"
            continue
        if block.lang not in RUN or block.marker.startswith("skip"):
            continue
        named = re.match(r"#\s*file:\s*(\S+)", block.text)
        if named and (ROOT / named.group(1)).is_file():
            theirs = {line.strip() for line in (ROOT / named.group(1)).read_text().splitlines()}
            for line in block.text.splitlines()[1:]:
                assert not line.strip() or line.strip() in theirs, \
                    f"{where}: {line.strip()!r} is not in {named.group(1)}"
            continue
        if named:
            (tmp_path / named.group(1)).write_text(block.text)
            continue
        last = run_block(block, tmp_path, env, where)


def test_the_site_builds_strict(tmp_path):
    """mkdocs.yml's site, every warning an error (a broken link or anchor, a page left out
    of the nav, a docstring mkdocstrings cannot read)."""
    try:
        import mkdocs  # noqa: F401
    except ImportError:
        pytest.fail("mkdocs is missing: pip install -e '.[docs]' (make installs it)")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d",
                           str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1",
                                            "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "api" / "index.html").read_text().count('class="doc ') > 20


def test_every_pyar_variable_the_code_reads_is_in_the_settings_page():
    read = set()
    for path in (ROOT / "pyar").rglob("*.py"):
        read |= set(re.findall(r"\bPYAR_[A-Z_]*[A-Z]\b", path.read_text()))
    page = (ROOT / "docs" / "settings.md").read_text()
    rows = set(re.findall(r"^\| `(PYAR_[A-Z_]+)` \|", page, re.M))
    assert read - rows == set(), f"not on docs/settings.md: {sorted(read - rows)}"
    assert rows - read == set(), f"on docs/settings.md, read nowhere: {sorted(rows - read)}"
