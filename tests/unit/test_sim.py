"""The simulator delivers with the step semantics and rejects broken schedules."""

import numpy as np
import pytest

import pyar
from pyar.core.schedule import Chunk, Recv, Send, Step

ALL = Chunk("data", 0, 4)

pytestmark = pytest.mark.usefixtures("scratch_registry")


def run(name, builder, size=2, count=4, dtype=np.int64):
    pyar.register_algorithm(name)(builder)
    inputs = [(np.arange(count) + 10 * (r + 1)).astype(dtype) for r in range(size)]
    return pyar.simulate(pyar.schedule(name, size, count), inputs)


def test_deadlock_names_rank_step_and_peer():
    def both_receive_first(rank, size, count, topology=None):
        return [Step([Recv(1 - rank, ALL)]), Step([Send(1 - rank, ALL)])]
    with pytest.raises(pyar.ScheduleError, match=r"deadlock: rank 0 is stuck at step 0 "
                                                 r"waiting for peer 1"):
        run("t_deadlock", both_receive_first)


def test_sends_rendezvous_so_send_send_deadlocks():
    def both_send_first(rank, size, count, topology=None):
        return [Step([Send(1 - rank, ALL)]), Step([Recv(1 - rank, ALL)])]
    with pytest.raises(pyar.ScheduleError, match="deadlock"):
        run("t_send_send", both_send_first)


def test_size_mismatch_names_both_ends():
    def mismatched(rank, size, count, topology=None):
        if rank == 0:
            return [Step([Send(1, Chunk("data", 0, 3))])]
        return [Step([Recv(0, ALL)])]
    with pytest.raises(pyar.ScheduleError, match=r"size mismatch: rank 1 step 0 receives 4 "
                                                 r"elements from peer 0, which sends 3"):
        run("t_mismatch", mismatched)


def test_unmatched_send_and_receive():
    def extra_send(rank, size, count, topology=None):
        return [Step([Send(1, ALL)])] * (2 if rank == 0 else 0) + \
               [Step([Recv(0, ALL)])] * (rank == 1)
    with pytest.raises(pyar.ScheduleError, match="unmatched send: rank 0 step 1 sends to peer 1"):
        run("t_extra_send", extra_send)

    def extra_recv(rank, size, count, topology=None):
        return [Step([Recv(1, ALL)])] * 2 if rank == 0 else [Step([Send(0, ALL)])]
    with pytest.raises(pyar.ScheduleError,
                       match="unmatched receive: rank 0 step 1 receives from peer 1"):
        run("t_extra_recv", extra_recv)


def test_a_step_sends_what_it_had_before_its_receives_land():
    # Both ranks send and fold the same chunk in one step (as recursive doubling does).
    def swap_and_fold(rank, size, count, topology=None):
        return [Step([Send(1 - rank, ALL), Recv(1 - rank, ALL, reduce=True)])]
    result = run("t_swap", swap_and_fold)
    assert result.outputs[0].tolist() == result.outputs[1].tolist() == [30, 32, 34, 36]


def test_folds_land_in_listed_order_and_scratch_relays():
    # rank 2 relays rank 1's data through scratch to rank 0, which folds both messages in
    def relay(rank, size, count, topology=None):
        if rank == 0:
            return [Step([Recv(2, ALL, True), Recv(2, ALL, True)])]
        if rank == 1:
            return [Step([Send(2, ALL)])]
        return [Step([Recv(1, Chunk("scratch", 4, 8))]),
                Step([Send(0, Chunk("scratch", 4, 8)), Send(0, ALL)])]
    result = run("t_relay", relay, size=3)
    assert result.outputs[0].tolist() == [60, 63, 66, 69]
    assert result.stats[2].bytes_received == 32 and result.stats[2].bytes_sent == 64
    assert pyar.schedule("t_relay", 3, 4).scratch_count(2) == 8


def test_reading_scratch_before_receiving_into_it_is_an_error():
    def sends_garbage(rank, size, count, topology=None):
        if rank == 0:
            return [Step([Send(1, Chunk("scratch", 0, 4))])]
        return [Step([Recv(0, ALL, reduce=True)])]
    with pytest.raises(pyar.ScheduleError, match=r"rank 0 step 0 sends scratch \[0, 4\) to peer "
                                                 r"1 before all of it was received into"):
        run("t_garbage", sends_garbage)

    def folds_into_garbage(rank, size, count, topology=None):
        if rank == 0:
            return [Step([Send(1, ALL)])]
        return [Step([Recv(0, Chunk("scratch", 0, 4), reduce=True)])]
    with pytest.raises(pyar.ScheduleError, match=r"rank 1 step 0 folds into scratch"):
        run("t_fold_garbage", folds_into_garbage)


def test_registered_algorithms_work_like_builtins():
    def swap_and_fold(rank, size, count, topology=None):
        return [Step([Send(1 - rank, Chunk("data", 0, count)),
                      Recv(1 - rank, Chunk("data", 0, count), reduce=True)])]
    pyar.register_algorithm("t_pairwise")(swap_and_fold)
    assert "t_pairwise" in pyar.algorithms()
    s = pyar.schedule("t_pairwise", 2, 5)
    out = pyar.simulate(s, [np.ones(5), np.full(5, 2.0)], op="avg").outputs
    assert out[0].tolist() == [1.5] * 5
