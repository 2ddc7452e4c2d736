"""Traffic and step counts measured by the simulator match what the docstrings claim."""

import math

import numpy as np
import pytest

import pyar


def stats(algorithm, size, count, itemsize=4):
    inputs = [np.ones(count, np.float32 if itemsize == 4 else np.float64)] * size
    return pyar.simulate(pyar.schedule(algorithm, size, count), inputs).stats


def fold_ranks(size):
    return 2 * (size - (1 << (size.bit_length() - 1)))


@pytest.mark.parametrize("size", range(2, 33))
@pytest.mark.parametrize("count", [1000, 4099])
def test_ring_is_bandwidth_optimal(size, count):
    nbytes = count * 4
    for r, s in enumerate(stats("ring", size, count)):
        # uneven blocks: each of the 2(N-1) messages is at most one element over M/N
        assert s.bytes_sent <= 2 * (size - 1) * (nbytes / size + 4), r
        assert s.bytes_sent >= 2 * (size - 1) * (nbytes // size // 4) * 4, r
        assert s.steps == 2 * (size - 1) and s.messages == 2 * (size - 1)


@pytest.mark.parametrize("size", range(2, 33))
def test_rabenseifner_traffic_and_steps(size):
    count = 4096
    nbytes = count * 4
    pof2 = 1 << (size.bit_length() - 1)
    optimum = 2 * (pof2 - 1) / pof2 * nbytes
    for r, s in enumerate(stats("rabenseifner", size, count)):
        folded = r < fold_ranks(size)
        if size == pof2:
            assert s.bytes_sent == optimum, r
        elif r % 2 == 0 and folded:
            assert s.bytes_sent == nbytes, r        # hands its data over, gets the result back
        else:
            assert s.bytes_sent <= optimum + nbytes, r
        expected_steps = (2 if folded and r % 2 == 0 else 2 * int(math.log2(pof2)) +
                          (2 if folded else 0))
        assert s.steps == expected_steps, r


@pytest.mark.parametrize("size", range(2, 33))
def test_recursive_doubling_traffic_and_steps(size):
    count = 100
    pof2 = 1 << (size.bit_length() - 1)
    rounds = int(math.log2(pof2))
    for r, s in enumerate(stats("recursive_doubling", size, count)):
        folded = r < fold_ranks(size)
        if folded and r % 2 == 0:
            assert (s.steps, s.bytes_sent) == (2, count * 4)
        else:
            assert s.steps == rounds + (2 if folded else 0)
            assert s.bytes_sent == (rounds + folded) * count * 4


@pytest.mark.parametrize("size", range(2, 33))
def test_binomial_steps_and_root_traffic(size):
    rounds = math.ceil(math.log2(size))
    st = stats("binomial", size, 64)
    assert st[0].steps == 2 * rounds
    assert st[0].bytes_sent == rounds * 64 * 4
    assert all(s.steps <= 2 * rounds for s in st)
    assert st[size - 1].bytes_sent == 64 * 4    # the last rank is a leaf


@pytest.mark.parametrize("size", range(2, 17))
def test_naive_root_carries_everything(size):
    st = stats("naive", size, 10)
    assert (st[0].steps, st[0].bytes_sent, st[0].bytes_received) == (2, (size - 1) * 40,
                                                                     (size - 1) * 40)
    assert all((s.steps, s.bytes_sent) == (2, 40) for s in st[1:])


def test_ring_beats_naive_at_the_root_by_far():
    ring, naive = stats("ring", 16, 1600), stats("naive", 16, 1600)
    assert max(s.bytes_sent for s in ring) * 7 < naive[0].bytes_sent


def collective_stats(collective, algorithm, size, count, root=0, topology=None):
    """Per-rank stats of ``collective`` on a buffer of ``count`` float32 (see pyar.collectives)."""
    per_rank = count // size if collective == "allgather" else count
    shape = (size, per_rank // size) if collective == "alltoall" else (per_rank,)
    inputs = [np.ones(shape, np.float32)] * size
    schedule = pyar.schedule(algorithm, size, count, collective=collective, root=root,
                             topology=topology)
    return pyar.simulate(schedule, inputs).stats


@pytest.mark.parametrize("size", [2, 3, 4, 5, 7, 8, 12, 16])
@pytest.mark.parametrize("collective,algorithm", [
    ("reduce_scatter", "ring"), ("reduce_scatter", "pairwise"), ("allgather", "ring"),
    ("allgather", "bruck"), ("reduce_scatter", "pat"), ("allgather", "pat"),
    ("alltoall", "pairwise"), ("alltoall", "linear")])
def test_the_bandwidth_optimal_ones_send_n_minus_1_over_n_of_the_buffer(collective, algorithm,
                                                                        size):
    count = size * 1000
    optimum = (size - 1) / size * count * 4
    for r, s in enumerate(collective_stats(collective, algorithm, size, count)):
        assert s.bytes_sent == optimum, (r, s)


@pytest.mark.parametrize("size", [2, 4, 8, 16, 32])
def test_recursive_halving_and_doubling_are_optimal_on_powers_of_two(size):
    count = size * 1000
    for collective, algorithm in (("reduce_scatter", "recursive_halving"),
                                  ("allgather", "recursive_doubling")):
        for s in collective_stats(collective, algorithm, size, count):
            assert s.bytes_sent == (size - 1) / size * count * 4
            assert s.steps == math.log2(size)


@pytest.mark.parametrize("size", [2, 3, 5, 8, 13, 16, 31])
def test_scatter_allgather_bcast_sends_about_2m_against_binomials_log_n_times_m(size):
    count, nbytes = size * 1000, size * 4000
    scatter = collective_stats("bcast", "scatter_allgather", size, count, root=size - 1)
    binomial = collective_stats("bcast", "binomial", size, count, root=size - 1)
    assert max(s.bytes_sent for s in scatter) <= 2 * (size - 1) / size * nbytes
    assert sum(s.bytes_sent for s in scatter) <= 2 * (size - 1) * nbytes / 1
    assert max(s.bytes_sent for s in binomial) == math.ceil(math.log2(size)) * nbytes
    assert binomial[size - 1].bytes_sent == max(s.bytes_sent for s in binomial)  # the root


@pytest.mark.parametrize("size", [2, 5, 8, 16])
def test_reduce_scatter_gather_moves_less_than_binomial_reduce(size):
    count, nbytes = size * 1000, size * 4000
    rsg = collective_stats("reduce", "reduce_scatter_gather", size, count)
    binomial = collective_stats("reduce", "binomial", size, count)
    if size == 2 ** int(math.log2(size)):
        assert max(s.bytes_sent for s in rsg) <= 2 * (size - 1) / size * nbytes
    root_rsg, root_binomial = rsg[0].bytes_received, binomial[0].bytes_received
    assert root_rsg < root_binomial if size >= 4 else root_rsg <= root_binomial


TOPOLOGIES = [pyar.Topology.regular(8, 4), pyar.Topology.regular(12, 3),
              pyar.Topology.regular(7, 3), pyar.Topology([0, 1] * 5),
              pyar.Topology([0, 0, 0, 0, 0, 1]), pyar.Topology([0, 0, 1, 1, 1, 2, 2, 2, 2])]


@pytest.mark.parametrize("topology", TOPOLOGIES, ids=repr)
def test_hierarchical_sends_fewer_bytes_across_nodes_than_ring(topology):
    size, count = topology.size, 1 << 14
    inter = {}
    for algorithm in ("hierarchical", "ring"):
        s = collective_stats("allreduce", algorithm, size, count, topology=topology)
        inter[algorithm] = sum(r.bytes_sent_inter_node for r in s)
        assert all(r.bytes_sent_intra_node + r.bytes_sent_inter_node == r.bytes_sent for r in s)
    nodes = len(topology.nodes)
    # each node sends 2(K-1)/K of the buffer across, whatever its size
    assert inter["hierarchical"] == nodes * 2 * (nodes - 1) / nodes * count * 4
    assert inter["hierarchical"] < inter["ring"], inter


def test_without_a_topology_nothing_counts_as_inter_node():
    s = collective_stats("allreduce", "hierarchical", 6, 600)
    assert all(r.bytes_sent_inter_node == 0 for r in s)


@pytest.mark.parametrize("size", [2, 3, 4, 7, 8, 16, 33])
def test_segmented_ring_sends_ring_bytes_in_more_steps(size):
    count = size * 100_000
    ring = collective_stats("allreduce", "ring", size, count)
    segmented = collective_stats("allreduce", "segmented_ring", size, count)
    parts = math.ceil(math.ceil(count / size) / pyar.core.schedule.SEGMENT)
    for a, b in zip(ring, segmented):
        assert a.bytes_sent == b.bytes_sent
        assert b.steps == a.steps * parts


@pytest.mark.parametrize("size", [2, 3, 4, 5, 8, 9, 16, 17, 64])
def test_double_binary_tree_spreads_the_load(size):
    count = 1 << 20
    s = collective_stats("allreduce", "double_binary_tree", size, count)
    nbytes = count * 4
    assert max(r.bytes_sent for r in s) <= 2 * nbytes
    assert max(r.bytes_received for r in s) <= 2 * nbytes
    if size > 2:    # each rank is inner in one tree only, so nobody carries a tree root's load
        assert max(r.bytes_sent for r in s) < 1.5 * min(r.bytes_sent for r in s) + nbytes
