"""``pyar draw``: the per-step table follows contributions as the simulator computes them,
for every registered algorithm of every collective; pictures are written."""

import doctest

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyar
from pyar import collectives
from pyar import cli
from pyar.cli import draw


def test_the_docstring_table_is_what_the_command_prints():
    result = doctest.testmod(draw)
    assert result.attempted >= 3 and result.failed == 0


def _every():
    return [(c, a) for c in collectives.names() for a in pyar.algorithms(c) if a != "mpi"]


@settings(max_examples=120)
@given(pair=st.sampled_from(_every()), size=st.integers(1, 9), count=st.integers(0, 20))
def test_the_final_holdings_are_the_simulators_sums_of_powers_of_two(pair, size, count):
    collective, algorithm = pair
    record = collectives.collective(collective)
    x_shape = record.shapes(size, count)[0]
    inputs = [np.full(x_shape, 1 << r, np.uint64) for r in range(size)]
    schedule = pyar.schedule(algorithm, size, record.count(inputs[0].size, size),
                             collective=collective)
    simulated = pyar.simulate(schedule, inputs, op="sum")
    _, states, sent = draw.timeline(schedule)
    for r in range(size):
        out = simulated.outputs[r]
        if out is not None:
            mine = record.result(states[-1][r]["data"].astype(np.uint64), x_shape, r, size, 0)
            assert mine.tolist() == out.tolist(), (collective, algorithm, r)
    assert [s * 8 for s in sent] == [s.bytes_sent for s in simulated.stats]
    assert draw.table(schedule).count("\n") >= size


def test_steps_are_columns_ring_moves_one_block_per_rank_per_step():
    columns, states, _ = draw.timeline(pyar.schedule("ring", 4, 8))
    assert len(columns) - 1 == 6
    assert all(len(col) == 4 for col in columns[1:])
    assert all(reduce for col in columns[1:4] for *_, reduce in col)
    assert not any(reduce for col in columns[4:] for *_, reduce in col)
    assert draw.label(0b101) == "0+2" and draw.label(0) == "-"


@pytest.mark.parametrize("suffix", ["png", "svg"])
def test_a_picture_is_written(tmp_path, suffix):
    path = tmp_path / f"dbt.{suffix}"
    draw.picture(pyar.schedule("double_binary_tree", 8, 8), str(path))
    assert path.stat().st_size > 5000


def test_the_command(tmp_path, capsys):
    from pyar import cli

    assert cli.main(["draw", "ring", "-N", "3", "--table"]) == 0
    assert "step 4: 0->1 [2:3)=" in capsys.readouterr().out
    assert cli.main(["draw", "binomial", "-N", "5", "--collective", "bcast", "--count", "3",
                     "-o", str(tmp_path / "b.png")]) == 0
    assert (tmp_path / "b.png").exists()
    for args, words in ((["draw", "ring", "-N", "0"], "--ranks must be >= 1"),
                        (["draw", "nosuch", "-N", "2", "--table"], "unknown allreduce"),
                        (["draw", "ring", "-o", "x.pdf"], ".png or .svg"),
                        (["draw", "ring", "-N", "70", "--table"], "at most 62 ranks")):
        with pytest.raises(SystemExit) as e:
            cli.main(args)
        assert e.value.code == 2 and words in capsys.readouterr().err, args


@pytest.mark.parametrize("algorithm", ["ring", "double_binary_tree", "rabenseifner", "bruck"])
def test_the_heatmap_counts_what_each_rank_sends_at_each_of_its_steps(algorithm):
    collective = "allgather" if algorithm == "bruck" else "allreduce"
    s = pyar.schedule(algorithm, 7, 30, collective=collective)
    sent = draw.sent_per_step(s, itemsize=4)
    for r in range(7):
        mine = s.steps(r)
        assert (sent[r, len(mine):] == 0).all()
        for i, step in enumerate(mine):
            assert sent[r, i] == 4 * sum(op.chunk.hi - op.chunk.lo for op in step.sends)


def test_any_rank_count_draws_as_a_heatmap(tmp_path):
    path = tmp_path / "ring.png"
    assert cli.main(["draw", "ring", "-N", "200", "-o", str(path)]) == 0   # beyond the arrows
    assert path.stat().st_size > 1000
    small = tmp_path / "small.svg"
    assert cli.main(["draw", "ring", "-N", "4", "--heatmap", "-o", str(small)]) == 0
    assert small.read_text().startswith("<?xml")
