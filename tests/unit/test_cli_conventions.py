"""What a newcomer expects of the command line: one meaning per short flag (docs/cli.md's
table), help without reStructuredText markup and on every flag, ``--version``; `pyar info`
once under mpiexec, with a per-node summary."""

import argparse
import re
import subprocess
import sys

import pytest

from launch import explain, run
from pyar import cli
from pyar.cli.info import summary

MARKUP = re.compile(r"``|:[a-z]+:`|`[^`]+`_?")


def subcommands():
    parser = cli.build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return parser, sub.choices


# docs/cli.md's table: each short flag's one meaning (its long form) in every subcommand
SHORT = {"-h": "--help", "-N": "--ranks", "-a": "--algo", "-b": "--minbytes",
         "-e": "--maxbytes", "-f": "--stepfactor", "-d": "--dtype", "-o": "--output",
         "-v": "--verbose"}
# pyar bench keeps nccl-tests' flags; -o is the one whose meaning differs there (the op)
NCCL_TESTS = {**SHORT, "-n": "--iters", "-w": "--warmup", "-c": "--check", "-o": "--op"}


@pytest.mark.parametrize("name", sorted(subcommands()[1]))
def test_every_short_flag_means_what_the_table_says(name):
    table = NCCL_TESTS if name == "bench" else SHORT
    for action in subcommands()[1][name]._actions:
        long = [f for f in action.option_strings if f.startswith("--")]
        for flag in action.option_strings:
            if not flag.startswith("--"):
                assert [table.get(flag)] == long, \
                    f"pyar {name} {flag} means {long}; the table says {table.get(flag)}"
        if "--ranks" in long:
            assert "-N" in action.option_strings, f"pyar {name} --ranks has no -N"


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert re.fullmatch(r"pyar \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_the_markup_stripper_leaves_plain_words():
    assert cli.plain("The ``pyar`` command: :func:`pyar.allreduce` and :class:`~a.Comm`, "
                     "`nccl-tests`_") == "The pyar command: pyar.allreduce and a.Comm, nccl-tests"


@pytest.mark.parametrize("name", sorted(subcommands()[1]))
def test_every_flag_has_plain_help_and_the_help_says_what_the_command_does(name, capsys):
    parser, choices = subcommands()
    sub = choices[name]
    assert sub.description, f"pyar {name} --help has no description"
    for action in sub._actions:
        assert action.help and action.help.strip(), \
            f"pyar {name}: {'/'.join(action.option_strings) or action.dest} has no help"
    with pytest.raises(SystemExit):
        cli.main([name, "--help"])
    text = capsys.readouterr().out
    assert not MARKUP.search(text), f"pyar {name} --help has markup: {MARKUP.search(text)}"


def test_the_top_help_is_plain(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    text = capsys.readouterr().out
    assert "The pyar command" in text and not MARKUP.search(text), text


def test_the_summary_shows_rank_0s_lines_others_where_they_differ_and_each_node():
    lines = [["pyar 1", "PYAR_ALGO: (unset)"], ["pyar 1", "PYAR_ALGO: ring"],
             ["pyar 1", "PYAR_ALGO: ring"], ["pyar 1", "PYAR_ALGO: (unset)"]]
    nodes = [{"host": "a", "cuda": "GPU 1"}, {"host": "a", "cuda": "GPU 1"},
             {"host": "b", "cuda": "GPU 1"}, {"host": "b", "cuda": "none"}]
    assert summary(lines, nodes) == [
        "pyar 1", "PYAR_ALGO: (unset)", "  ranks 1-2: PYAR_ALGO: ring",
        "nodes: 2 (4 ranks)",
        "node a: ranks 0-1 (2)", "  GPU 1",
        "node b: ranks 2-3 (2)", "  rank 2: GPU 1", "  rank 3: none"]


def test_info_under_mpiexec_prints_once_with_a_node_summary():
    proc = run(3, "-m", "pyar", "info", timeout=120)
    assert proc.returncode == 0, explain(proc)
    out = proc.stdout
    assert out.count("pyar ") == 1 and out.count("MPI library: ") == 1, out
    assert "ranks: 3" in out and "nodes: 1 (3 ranks)" in out, out
    assert re.search(r"^node \S+: ranks 0-2 \(3\)$", out, re.M), out
    assert re.search(r"^  CUDA-aware MPI (yes|no); GPU buffers: ", out, re.M), out


def test_info_alone_prints_as_before():
    proc = subprocess.run([sys.executable, "-m", "pyar", "info"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("pyar ") and "nodes: 1 (1 rank)" in proc.stdout
