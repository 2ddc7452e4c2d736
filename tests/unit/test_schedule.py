"""The schedule model: data types, local checks, splitting, the registry."""

import functools

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyar
from pyar.algorithms import algorithm, builder, ring, segmented_ring
from pyar.core.schedule import Chunk, Recv, Schedule, Send, Step, check_steps, compact, split


@given(st.integers(0, 5000), st.integers(1, 200))
def test_split_cuts_like_array_split(count, parts):
    expected = [(a[0], a[-1] + 1) if a.size else None
                for a in np.array_split(np.arange(count), parts)]
    got = split(count, parts)
    assert len(got) == parts
    assert got[0][0] == 0 and got[-1][1] == count
    for (lo, hi), want in zip(got, expected):
        assert want is None and lo == hi or (lo, hi) == want


def test_step_sorts_sends_and_receives():
    c = Chunk("data", 0, 4)
    step = Step([Send(1, c), Recv(2, c, reduce=True), Send(3, c)])
    assert step.sends == (Send(1, c), Send(3, c))
    assert step.recvs == (Recv(2, c, True),)
    assert step == Step(step.ops) and hash(step) == hash(Step(step.ops))
    with pytest.raises(TypeError, match="Send and Recv"):
        Step([c])


def test_compact_drops_empty_transfers_and_steps():
    empty, full = Chunk("data", 3, 3), Chunk("data", 0, 3)
    steps = compact([[Send(1, empty)], [Send(1, full), Recv(1, empty)], []])
    assert steps == [Step([Send(1, full)])]


@pytest.mark.parametrize("steps, message", [
    ([Step([Send(-1, Chunk("data", 0, 1))])], r"peer -1 is not a rank in \[0, 4\)"),
    ([Step([Send(5, Chunk("data", 0, 1))])], "peer 5 is not a rank"),
    ([Step([Send(0, Chunk("data", 0, 1))])], "to itself do not pair up"),
    ([Step([Send(0, Chunk("data", 0, 2)), Recv(0, Chunk("scratch", 0, 1))])],
     r"sends of \[2\] elements, receives of \[1\]"),
    ([Step([Recv(2, Chunk("data", 0, 11))])], r"outside buffer 'data' \(data holds 10"),
    ([Step([Recv(2, Chunk("data", 4, 3))])], "outside buffer"),
    ([Step([Recv(2, Chunk("extra", 0, 1))])], "is not one of"),
    ([Step([Recv(2, Chunk("data", 0, 4)), Recv(3, Chunk("data", 3, 5), reduce=True)])],
     "peers 2 and 3 overlap"),
    (["not a step"], "expected a Step"),
])
def test_check_steps_names_rank_step_and_peer(steps, message):
    with pytest.raises(pyar.ScheduleError, match=message) as e:
        check_steps(steps, rank=0, size=4, count=10)
    assert "rank 0 step 0" in str(e.value)


def test_a_message_to_itself_is_a_local_copy_of_the_chunk_as_the_step_began():
    """Rank 1 copies data into scratch and receives rank 0's data over it in one step; the
    next step folds the copy back in: every rank ends with the same bits, x0 + x1."""
    def swap(rank, size, count, topology=None):
        data, spare = Chunk("data", 0, count), Chunk("scratch", 0, count)
        if rank == 0:
            return [Step([Send(1, data), Recv(1, data, True)])]
        return [Step([Send(0, data), Send(1, data), Recv(1, spare), Recv(0, data)]),
                Step([Send(1, spare), Recv(1, data, True)])]
    xs = [np.array([1.0, 2.0], np.float32), np.array([10.0, 20.0], np.float32)]
    out = pyar.simulate(Schedule("swap", "allreduce", 2, 2, swap), xs)
    assert [o.tolist() for o in out.outputs] == [[11.0, 22.0], [11.0, 22.0]]
    assert [s.bytes_sent for s in out.stats] == [8, 8]      # the copies are not traffic
    assert [s.messages for s in out.stats] == [1, 1]


def test_overlapping_folds_in_one_step_are_fine():
    c = Chunk("data", 0, 4)
    check_steps([Step([Recv(1, c, True), Recv(2, c, True)])], rank=0, size=3, count=4)


def test_unknown_algorithm_lists_the_registered_ones():
    with pytest.raises(ValueError, match="registered: bine, binomial, double_binary_tree, "
                                         "hierarchical, knomial, naive"):
        pyar.schedule("nope", 4, 10)
    with pytest.raises(ValueError, match="no schedule"):
        pyar.schedule("mpi", 4, 10)
    with pytest.raises(ValueError, match="collective must be one of"):
        pyar.algorithms("allsorts")


@pytest.mark.parametrize("name", ["mpi", "auto", "has space", 3])
def test_register_algorithm_rejects_reserved_and_bad_names(name):
    with pytest.raises(ValueError, match="identifier"):
        pyar.register_algorithm(name)


def test_an_algorithm_is_one_record_with_its_picture(scratch_registry):
    record = algorithm("ring", "reduce_scatter")
    assert record[:3] == ("ring", "reduce_scatter", ring.ring_reduce_scatter)
    assert record.doc == ring.ring_reduce_scatter.__doc__           # the builder's own
    assert algorithm("ring").doc == ring.__doc__                     # its file's, with the picture
    assert "┌──► 0 ──► 1" in ring.__doc__
    short = functools.partial(segmented_ring.segmented_ring, segment=8)
    assert pyar.register_algorithm("short_segments", "allreduce")(short) is short
    assert algorithm("short_segments") == ("short_segments", "allreduce", short, None, False,
                                           False, True)
    assert builder("short_segments") is short
    assert algorithm("short_segments").doc == segmented_ring.__doc__
    with pytest.raises(TypeError, match="callable cost"):
        pyar.register_algorithm("priced", cost=3)
    with pytest.raises(ValueError, match="collective must be one of"):
        pyar.register_algorithm("elsewhere", "allsorts")


def test_schedules_are_memoised_per_arguments():
    assert pyar.schedule("ring", 5, 100) is pyar.schedule("ring", 5, 100)
    assert pyar.schedule("ring", 5, 100) is not pyar.schedule("ring", 5, 101)
    with pytest.raises(ValueError, match="size must be"):
        pyar.schedule("ring", 0, 100)
    with pytest.raises(ValueError, match="count must be"):
        pyar.schedule("ring", 4, -1)
    with pytest.raises(ValueError, match="rank must be"):
        pyar.schedule("ring", 4, 10).steps(4)


def test_algorithms_lists_the_builtins_and_mpi():
    assert pyar.algorithms() == ["bine", "binomial", "double_binary_tree", "hierarchical",
                                 "knomial", "naive", "one_shot", "rabenseifner", "recexch",
                                 "recursive_doubling", "ring", "segmented_ring", "swing_bandwidth",
                                 "swing_latency", "two_shot", "mpi"]
    assert pyar.algorithms("reduce_scatter") == ["bine", "pairwise", "pat", "recursive_halving",
                                                 "ring", "mpi"]
    assert pyar.algorithms("allgather") == ["bine", "bruck", "pat", "recursive_doubling", "ring",
                                            "mpi"]
    assert pyar.algorithms("reduce") == ["bine", "binomial", "knomial", "reduce_scatter_gather",
                                         "mpi"]
    assert pyar.algorithms("bcast") == ["bine", "binomial", "knomial", "scatter_allgather", "mpi"]
    assert pyar.algorithms("alltoall") == ["linear", "pairwise", "mpi"]
    assert pyar.algorithms("barrier") == ["dissemination", "mpi"]
