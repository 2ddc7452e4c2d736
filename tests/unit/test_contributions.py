"""The simulator's contribution mode: it agrees with data mode, and it catches broken schedules."""

import re

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyar
from pyar import cli, collectives
from pyar.algorithms import algorithms, builder as algorithms_builder
from pyar.cli import sim as workbench
from pyar.core.schedule import Chunk, Recv, Send, Step
from pyar.model import contributions, network, sim

from sim_cases import case

CASES = [(c, a) for c in collectives.names() for a in algorithms(c) if a != "mpi"]


def _wrong_in_data(record, schedule, inputs):
    """Elements data mode finds wrong (int64 sums: exact)."""
    expected = workbench.reference(record, inputs, "sum") if record.name == "allreduce" else \
        [record.expected(inputs, r, schedule.root, "sum") for r in range(schedule.size)]
    return workbench.wrong(record, pyar.simulate(schedule, inputs).outputs, expected, "sum")


@pytest.mark.parametrize("collective,name", CASES)
@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 19), c=st.integers(0, 40), root=st.integers(0, 18))
def test_contribution_and_data_modes_agree(collective, name, n, c, root):
    """Every algorithm: the same traffic as data mode, and both find its result right."""
    record, schedule, inputs = case(collective, name, n, c, root)
    result = pyar.simulate_contributions(schedule, "int64")
    assert result.verdict.ok, result.verdict
    assert result.outputs == [None] * n
    if record.count(1, n):
        assert _wrong_in_data(record, schedule, inputs) == 0
    assert result.stats == pyar.simulate(schedule, "int64", data=False).stats


def _broken(base, change):
    """``base``'s allreduce builder with ``change(rank, steps)`` applied to every rank's steps."""
    build = algorithms_builder(base)

    def broken(rank, size, count, topology=None):
        return change(rank, list(build(rank, size, count, topology)))
    return broken


def _drop_a_fold(rank, steps):          # rank 1's first fold copies instead: contributions lost
    if rank != 1:
        return steps
    i = next(i for i, s in enumerate(steps) if any(getattr(op, "reduce", False) for op in s.ops))
    ops = [Recv(op.peer, op.chunk) if type(op) is Recv and op.reduce else op
           for op in steps[i].ops]
    return steps[:i] + [Step(ops)] + steps[i + 1:]


def _fold_twice(rank, steps):           # x0 folded into rank 1's data before it starts
    data = Chunk("data", 0, 8)
    if rank == 0:
        return [Step([Send(1, data)])] + steps
    if rank == 1:
        return [Step([Recv(0, data, reduce=True)])] + steps
    return steps


def _swap_halves(rank, steps):          # rank 2 ends with its halves swapped: from other elements
    if rank != 2:
        return steps
    low, high = Chunk("data", 0, 4), Chunk("data", 4, 8)
    return steps + [Step([Send(2, low), Send(2, high), Recv(2, high), Recv(2, low)])]


BROKEN = [(_drop_a_fold, "3 contributions where 4 belong"),
          (_fold_twice, "5 contributions where 4 belong"),
          (_swap_halves, "4 contributions, but not the ones that belong")]


# (one_shot's folds share a step: a copy among them is a ScheduleError, not a lost fold)
@pytest.mark.parametrize("base,change,held", [
    (base, change, held) for base in ("ring", "rabenseifner", "swing_bandwidth", "one_shot")
    for change, held in BROKEN if (base, change) != ("one_shot", _drop_a_fold)])
def test_a_broken_schedule_is_caught(scratch_registry, base, change, held):
    """A dropped, a doubled and a misplaced contribution: the verdict says where and what,
    and counts the wrong elements data mode finds (int64 sums: exact)."""
    name = f"t_{change.__name__}_{base}"
    pyar.register_algorithm(name)(_broken(base, change))
    schedule = pyar.schedule(name, 4, 8)
    verdict = pyar.simulate_contributions(schedule).verdict
    assert not verdict.ok and held in verdict.first, verdict
    inputs = workbench.samples(4, 8, "int64", "sum")
    want = inputs.sum(axis=0)
    outputs = pyar.simulate(schedule, inputs).outputs
    assert verdict.wrong == sum(np.count_nonzero(out != want) for out in outputs) > 0


def test_sketch_tells_sets_of_one_size_apart():
    """Folding x0 twice and x3 never gives a word other than x0 + x1 + x2 + x3's."""
    edges = np.array([0, 8])
    start = contributions.initial("allreduce", 4, edges)
    right, wrong = start[0].copy(), start[0].copy()
    for r in (1, 2, 3):
        contributions.fold(right, start[r])
    for r in (0, 1, 2):
        contributions.fold(wrong, start[r])
    assert contributions.check("allreduce", np.stack([right] * 4), edges, 0).ok
    verdict = contributions.check("allreduce", np.stack([right, right, right, wrong]), edges, 0)
    assert not verdict.ok and verdict.wrong == 8
    assert verdict.first == "rank 3 elements [0, 8)" and verdict.where == (3, 0)


def test_it_raises_the_simulators_errors(scratch_registry):
    everything = Chunk("data", 0, 4)
    broken = {
        "deadlock: rank 0 is stuck at step 0 waiting for peer 1":
            lambda r, n, c, t=None: [Step([Recv(1 - r, everything)]),
                                     Step([Send(1 - r, everything)])],
        "size mismatch: rank 1 step 0 receives 4 elements from peer 0, which sends 3":
            lambda r, n, c, t=None: [Step([Send(1, Chunk("data", 0, 3))])] if r == 0 else
            [Step([Recv(0, everything)])],
        "rank 0 step 0 sends scratch \\[0, 4\\) to peer 1 before all of it was received":
            lambda r, n, c, t=None: [Step([Send(1, Chunk("scratch", 0, 4))])] if r == 0 else
            [Step([Recv(0, everything)])],
    }
    for k, (message, build) in enumerate(broken.items()):
        pyar.register_algorithm(f"t_raises{k}")(build)
        with pytest.raises(pyar.ScheduleError, match=message):
            pyar.simulate_contributions(pyar.schedule(f"t_raises{k}", 2, 4))


def _rows(out):
    return {line.split()[0]: line for line in out.splitlines() if not line.startswith("#")}


def test_sim_chooses_the_contribution_mode_where_data_does_not_fit(monkeypatch, capsys):
    """auto runs data where it fits and contributions where not, naming the mode in the row;
    --mode data where it does not fit is a row naming the bytes and the mode to use."""
    argv = ["sim", "-N", "8", "--count", "4096", "-a", "ring,one_shot"]
    assert cli.main(argv) == 0
    rows = _rows(capsys.readouterr().out)
    assert all(r.split()[-2:] == ["data", "yes"] for r in rows.values()), rows
    monkeypatch.setattr(sim, "available_memory", lambda: 600_000)   # ring: 2 x (data + x) fit
    assert cli.main(argv) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["ring"].split()[-2:] == ["data", "yes"]
    assert rows["one_shot"].split()[-2:] == ["contributions", "yes"], rows
    assert cli.main(argv + ["--mode", "data"]) == 1
    rows = _rows(capsys.readouterr().out)
    assert "NO: data mode needs 1.0 MiB" in rows["one_shot"], rows
    assert "pyar sim --mode contributions" in rows["one_shot"]


@pytest.mark.parametrize("name,n", [("ring", 37), ("recursive_doubling", 32), ("rabenseifner", 64),
                                    ("naive", 50)])
def test_the_table_estimate_is_the_table_where_ranks_are_alike(name, n):
    """Ranks alike: the estimate is the table's rows; a root's fan-in is not counted for
    every rank (naive: the median rank's two transfers)."""
    schedule = pyar.schedule(name, n, 1000)
    rows = schedule.table().rank.size
    estimate = sim.table_rows(pyar.schedule(name, n, 1001))
    assert estimate == (2 * n if name == "naive" else rows), (estimate, rows)


STREAMED = [("allreduce", a) for a in ("ring", "one_shot", "two_shot", "segmented_ring:segment=3",
                                       "hierarchical")] + \
    [(c, "ring") for c in ("reduce_scatter", "allgather")]


def _plain(collective, name):
    """``name``'s builder registered again without its vectorized forms: the table path."""
    made = algorithms_builder(name, collective)
    plain = f"t_plain_{name.partition(':')[0]}"
    pyar.register_algorithm(plain, collective)(lambda r, n, c, t=None: made(r, n, c, t))
    return plain


def _messages_of_table(schedule):
    """Every message of the schedule's table: (sender, its step, receiver, its step, the two
    chunks as (scratch, lo, hi), folds)."""
    t = schedule.table()
    sends = np.flatnonzero(t.send)
    p = sim.partners(t)[sends]
    return sorted(zip(*(c.tolist() for c in (
        t.rank[sends], t.step[sends], t.peer[sends], t.step[p], t.scratch[sends], t.lo[sends],
        t.hi[sends], t.scratch[p], t.lo[p], t.hi[p], t.reduce[p]))))


def _messages_of_waves(waves, size):
    """The same of a Waves, each rank's steps those of the waves it has a message in."""
    steps, found = np.zeros(size, np.int64), []
    for step in waves.steps():
        active = np.zeros(size, bool)
        for m in step:
            keep = waves.hi[m.out] > waves.lo[m.out]
            src, dst, out, into = m.src[keep], m.dst[keep], m.out[keep], m.into[keep]
            found += zip(*(c.tolist() for c in (
                src, steps[src], dst, steps[dst], waves.scratch[out], waves.lo[out],
                waves.hi[out], waves.scratch[into], waves.lo[into], waves.hi[into],
                np.full(src.size, m.fold))))
            active[src] = active[dst] = True
        steps += active
    return sorted(found)


@pytest.mark.parametrize("collective,name", STREAMED)
@pytest.mark.parametrize("n,c", [(2, 7), (3, 1), (5, 3), (7, 40), (16, 100), (33, 64)])
def test_streamed_equals_table(scratch_registry, collective, name, n, c):
    """The waves are the builder's messages, step for step; streamed, the contribution mode
    gives the table path's bytes, steps, link loads and verdict."""
    schedule = pyar.schedule(name, n, c, collective=collective)
    waves = schedule.waves()
    assert waves is not None
    assert _messages_of_waves(waves, n) == _messages_of_table(schedule)
    net = network.torus([8, 8], 1)
    streamed = pyar.simulate_contributions(schedule, "int64", network=net)
    table = pyar.simulate_contributions(
        pyar.schedule(_plain(collective, name), n, c, collective=collective), "int64",
        network=net)
    assert streamed.verdict.ok and table.verdict.ok
    assert streamed.stats == table.stats
    a, b = streamed.traffic, table.traffic
    assert a.link_bytes.tolist() == b.link_bytes.tolist() and a.max_link == b.max_link
    for column in ("steps", "step_links", "step_bytes"):
        assert getattr(a, column).tolist() == getattr(b, column).tolist(), column
    assert sorted(a.hops.tolist()) == sorted(b.hops.tolist())


def _rewaved(base, change):
    """``base``'s builder registered with its waves' steps passed through ``change``."""
    build = algorithms_builder(base)

    def broken(rank, size, count, topology=None):
        return build(rank, size, count, topology)

    def waves(size, count, topology=None):
        w = build.waves(size, count, topology)
        return w._replace(steps=lambda: change(w.steps()))
    broken.waves = waves
    name = f"t_waves_{change.__name__}_{base}"
    pyar.register_algorithm(name)(broken)
    return name


def _copy_first_fold(steps):        # the first step's folds copy: contributions lost
    for k, step in enumerate(steps):
        yield [m._replace(fold=False) for m in step] if k == 0 else step


def _fold_twice(steps):             # the second step's parts land twice
    for k, step in enumerate(steps):
        yield [m for m in step for _ in range(1 + (k == 1))]


def _shift_a_chunk(steps):          # rank 0 sends the next chunk: a size mismatch or wrong data
    for k, step in enumerate(steps):
        step = list(step)
        m = step[0]
        out = m.out.copy()
        out[0] = (out[0] + 1) % len(m.out)
        yield [m._replace(out=out)] + step[1:] if k == 0 else step


def _read_what_landed(steps):       # a step's parts in the wrong order
    for k, step in enumerate(steps):
        yield list(step)[::-1] if k == 0 else step


@pytest.mark.parametrize("base,change,caught", [
    ("ring", _copy_first_fold, "contributions where"),
    ("two_shot", _copy_first_fold, "contributions where"),
    ("one_shot", _fold_twice, "contributions where"),
    ("ring", _shift_a_chunk, "size mismatch: rank 1 step 0 receives data [6, 7) from peer 0, "
                             "which sends data [0, 2) at its step 0"),
    ("one_shot", _read_what_landed, "rank 1 step 0 sends data [0, 8) to peer 0 after an earlier "
                                    "part of its step landed on it"),
])
def test_a_broken_stream_is_caught(scratch_registry, base, change, caught):
    """A stream that loses or doubles contributions fails its verdict; one that breaks the
    rules of Waves is a ScheduleError naming rank, step and chunk."""
    schedule = pyar.schedule(_rewaved(base, change), 4, 8 if base != "ring" else 7)
    if "contributions" in caught:
        verdict = pyar.simulate_contributions(schedule).verdict
        assert not verdict.ok and caught in verdict.first, verdict
    else:
        with pytest.raises(pyar.ScheduleError, match=re.escape(caught)):
            pyar.simulate_contributions(schedule)


def test_auto_chooses_contributions_where_data_is_slow_or_does_not_fit(monkeypatch, capsys):
    """auto runs data where it fits and is quick, else contributions; where the table does
    not fit, ring streams and an algorithm without waves is a row saying so; a mode asked
    for that needs the table is a row naming the mode that streams."""
    argv = ["sim", "-N", "8", "--count", "4096", "-a", "ring,rabenseifner"]
    monkeypatch.setattr(workbench, "DATA_ELEMENTS", 8 * 4096)
    assert cli.main(argv) == 0
    rows = _rows(capsys.readouterr().out)
    assert all(r.split()[-2:] == ["contributions", "yes"] for r in rows.values()), rows
    monkeypatch.setattr(workbench, "DATA_ELEMENTS", 1 << 27)
    monkeypatch.setattr(sim, "ROW_BYTES", 10 ** 12)      # no table fits
    assert cli.main(argv) == 1
    rows = _rows(capsys.readouterr().out)
    assert rows["ring"].split()[-2:] == ["contributions", "yes"], rows
    assert "not run: its table of every transfer does not fit" in rows["rabenseifner"]
    assert cli.main(argv + ["--mode", "data"]) == 1
    rows = _rows(capsys.readouterr().out)
    assert "--mode contributions streams it" in rows["ring"], rows
    assert "Traceback" not in rows["ring"]


def test_words_that_do_not_fit_are_a_row_naming_the_bytes(monkeypatch, capsys):
    monkeypatch.setattr(contributions, "available_memory", lambda: 100)
    assert cli.main(["sim", "-N", "8", "--count", "64", "-a", "ring,rabenseifner",
                     "--mode", "contributions"]) == 1
    rows = _rows(capsys.readouterr().out)
    for row in rows.values():
        assert "NO: the contribution mode needs 512 B for its words" in row, rows
