"""Swing (swing_latency, swing_bandwidth): its peers and butterfly layout, its traffic and steps,
bitwise identity across ranks, and 1,024 ranks."""

import math

import numpy as np
import pytest

import pyar
from pyar.algorithms import _swing
from pyar.core.schedule import Chunk, Recv, Send, compact

NAMES = ["swing_latency", "swing_bandwidth"]


def inputs(size, count, dtype=np.int64):
    """Rank r's element i is (r+1)*1000+i: a missing or doubled contribution shows."""
    return [((r + 1) * 1000 + np.arange(count)).astype(dtype) for r in range(size)]


def test_rho_and_the_peers_are_the_papers():
    assert [_swing.rho(s) for s in range(6)] == [1, -1, 3, -5, 11, -21]
    assert [_swing.peer(r, 2, 8) for r in range(8)] == [3, 6, 5, 0, 7, 2, 1, 4]
    for pof2 in (2, 4, 8, 64, 1024):
        for s in range(pof2.bit_length() - 1):
            got = _swing.peers(s, pof2)
            assert got.tolist() == [_swing.peer(r, s, pof2) for r in range(pof2)]
            assert (got[got] == np.arange(pof2)).all()       # a pairing
            distance = np.minimum((got - np.arange(pof2)) % pof2, (np.arange(pof2) - got) % pof2)
            assert (distance <= min(2 ** s, pof2 // 2)).all()
            if s >= 2 and pof2 > 2 ** (s + 1):
                assert (distance < 2 ** s).all()              # nearer than recursive doubling's


@pytest.mark.parametrize("pof2", [2 ** k for k in range(9)])
def test_the_layout_makes_every_butterfly_group_a_range(pof2):
    lay = _swing.layout(pof2)
    groups = [frozenset([r]) for r in range(pof2)]           # group(r, L), then upwards
    for s in range(lay.steps - 1, -1, -1):
        peer = _swing.peers(s, pof2)
        groups = [groups[r] | groups[peer[r]] for r in range(pof2)]
        for r in range(pof2):
            lo, hi = _swing.group(int(lay.key[r]), s, lay.steps)
            assert sorted(lay.key[list(groups[r])].tolist()) == list(range(lo, hi)), (s, r)
    assert sorted(lay.key.tolist()) == list(range(pof2))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("size", [100, 255, 1000, 1024])
def test_large_rank_counts(name, size):
    count = 2 * size + 5
    xs = inputs(size, count)
    out = pyar.simulate(pyar.schedule(name, size, count), xs).outputs
    want = np.sum(xs, axis=0)
    assert all(np.array_equal(o, want) for o in out)


@pytest.mark.parametrize("size", range(2, 34))
def test_traffic_and_steps(size):
    count = 64 * 3 * 32                      # divisible by every power of two up to 64
    pof2 = 1 << (size.bit_length() - 1)
    extra, k, m = size - pof2, int(math.log2(pof2)), 8 * count
    for name, steps, sent in (("swing_latency", k, k * m),
                              ("swing_bandwidth", 2 * k, 2 * (pof2 - 1) * m // pof2)):
        stats = pyar.simulate(pyar.schedule(name, size, count), inputs(size, count)).stats
        for r, s in enumerate(stats):
            if r >= pof2:                                     # hands over, gets the result
                assert (s.steps, s.bytes_sent, s.bytes_received) == (2, m, m), (name, r)
            elif r + extra >= pof2:                           # stands for two ranks
                assert (s.steps, s.bytes_sent) == (steps + 2, sent + m), (name, r)
            else:
                assert (s.steps, s.bytes_sent) == (steps, sent), (name, r)


@pytest.mark.parametrize("pof2", [8, 16, 32])
def test_the_largest_messages_go_to_the_nearest_peers(pof2):
    """swing_bandwidth: reduce-scatter step s sends M/2^(s+1) to a peer |rho(s)| links away
    on the ring of ranks; the allgather mirrors it."""
    count = 4 * pof2
    k = pof2.bit_length() - 1
    for r in range(pof2):
        steps = pyar.schedule("swing_bandwidth", pof2, count).steps(r)
        assert len(steps) == 2 * k
        for s in range(k):
            for step in (steps[s], steps[2 * k - 1 - s]):
                (send,) = step.sends
                assert min((send.peer - r) % pof2, (r - send.peer) % pof2) == abs(_swing.rho(s))
                assert send.chunk.count == count >> (s + 1)


def nearest_first(rank, size, count, topology=None):
    """swing_latency in the paper's order of steps (nearest peer first), powers of two only."""
    everything = Chunk("data", 0, count)
    return compact([Send(_swing.peer(rank, s, size), everything),
                    Recv(_swing.peer(rank, s, size), everything, reduce=True)]
                   for s in range(size.bit_length() - 1))


def test_farthest_first_is_what_gives_every_rank_the_same_bits(scratch_registry):
    """The paper's order adds different partial sums on different ranks (correct, but not
    bitwise identical); swing_latency's, farthest first, is a butterfly."""
    pyar.register_algorithm("t_nearest_first")(nearest_first)
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(4096) * 10.0 ** rng.integers(-8, 8, 4096) for _ in range(8)]
    paper = pyar.simulate(pyar.schedule("t_nearest_first", 8, 4096), xs).outputs
    ours = pyar.simulate(pyar.schedule("swing_latency", 8, 4096), xs).outputs
    assert len({o.tobytes() for o in paper}) > 1
    assert len({o.tobytes() for o in ours}) == 1
    assert np.allclose(paper[0], ours[0], rtol=1e-9, atol=1e-6)
