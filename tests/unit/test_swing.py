"""Swing (swing_latency, swing_bandwidth): its peers and butterfly layout, its traffic and steps,
bitwise identity across ranks, and 1,024 ranks."""

import math

import numpy as np
import pytest

import pyar
from pyar.algorithms import _swing
from pyar.core.schedule import Chunk, Recv, Send, compact
from pyar.model.network import torus

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


# --- multi-dimensional tori and ports ------------------------------------------------------

TORI = [(4, 4), (8, 4), (2, 2, 4), (8, 8), (4, 2, 8)]


def coordinates(dims):
    """``[rank, d]``: rank coordinates with dimension 0 fastest (as the network's torus)."""
    r = np.arange(math.prod(dims))
    return np.stack([r // math.prod(dims[:d]) % k for d, k in enumerate(dims)], axis=1)


@pytest.mark.parametrize("dims", TORI)
def test_on_a_torus_each_step_moves_one_coordinate_by_rho(dims):
    at = coordinates(dims)
    for port in range(2 * len(dims)):
        order = _swing.steps(dims, port)
        assert order[0][0] == port % len(dims)                    # a port's first dimension
        assert sorted(order) == sorted((d, j) for d, k in enumerate(dims)
                                       for j in range(k.bit_length() - 1))
        for s, (d, j) in enumerate(order):
            got = _swing.peers(s, dims, port)
            assert (got[got] == np.arange(got.size)).all()        # a pairing
            moved = at[got] != at
            assert not np.delete(moved, d, axis=1).any()          # only dimension d changes
            shift = (at[got, d] - at[:, d]) % dims[d]
            sign = np.where(at[:, d] % 2 == 0, 1, -1) * (-1 if port >= len(dims) else 1)
            assert (shift == (sign * _swing.rho(j)) % dims[d]).all(), (port, s)


@pytest.mark.parametrize("dims", TORI)
def test_the_torus_layout_makes_every_butterfly_group_a_range(dims):
    size = math.prod(dims)
    for port in range(2 * len(dims)):
        lay = _swing.layout(dims, port)
        groups = [frozenset([r]) for r in range(size)]
        for s in range(lay.steps - 1, -1, -1):
            peer = _swing.peers(s, dims, port)
            groups = [groups[r] | groups[peer[r]] for r in range(size)]
            for r in range(size):
                lo, hi = _swing.group(int(lay.key[r]), s, lay.steps)
                assert sorted(lay.key[list(groups[r])].tolist()) == list(range(lo, hi))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("params,size", [("dims=4x4", 16), ("dims=4x4,ports=4", 16),
                                         ("dims=8x4,ports=3", 32), ("dims=2x2x4,ports=6", 16),
                                         ("dims=16", 16), ("ports=2", 13), ("ports=2", 2)])
@pytest.mark.parametrize("count", [0, 1, 5, 1000])
def test_torus_and_ports_sum_exactly_and_every_rank_has_the_same_bits(name, params, size,
                                                                       count):
    algo = f"{name}:{params}"
    exact = inputs(size, count)
    out = pyar.simulate(pyar.schedule(algo, size, count), exact).outputs
    assert all(np.array_equal(o, np.sum(exact, axis=0)) for o in out)
    rng = np.random.default_rng(count)
    floats = [rng.standard_normal(count).astype(np.float32) for _ in range(size)]
    out = pyar.simulate(pyar.schedule(algo, size, count), floats).outputs
    assert all(o.tobytes() == out[0].tobytes() for o in out)
    np.testing.assert_allclose(out[0], np.sum(floats, axis=0, dtype=np.float64), atol=1e-4)


def test_ports_split_the_vector_and_every_step_uses_every_port():
    """The paper's multi-port Swing: 2D collectives on 2D slices, one link each."""
    sched = pyar.schedule("swing_bandwidth:dims=4x4,ports=4", 16, 64 * 16)
    one = pyar.schedule("swing_bandwidth:dims=4x4", 16, 64 * 16)
    for r in range(16):
        steps, single = sched.steps(r), one.steps(r)
        assert len(steps) == len(single) == 8
        for step, alone in zip(steps, single):
            assert len(step.sends) == 4 and len(alone.sends) == 1
            assert sum(op.chunk.count for op in step.sends) == alone.sends[0].chunk.count
            assert len({op.peer for op in step.sends}) == 4           # four distinct links


@pytest.mark.parametrize("name", NAMES)
def test_on_the_8x8_torus_the_2d_forms_load_the_busiest_link_less(name):
    """The paper's point, on the simulator's routes: Swing along the torus's dimensions puts
    fewer bytes on its most loaded link than 1-D Swing and than recursive halving-doubling;
    on four ports, fewer again than on one."""
    network = torus([8, 8], link_bw=50)
    base = {"swing_bandwidth": "rabenseifner", "swing_latency": "recursive_doubling"}[name]

    def link_max(algo):
        built = pyar.schedule(algo, 64, 1 << 16)
        loads = pyar.simulate(built, "float32", data=False, network=network).traffic
        return int(loads.link_bytes.max())
    flat, two, four = (link_max(f"{name}{p}") for p in ("", ":dims=8x8", ":dims=8x8,ports=4"))
    assert two < flat and two < link_max(base)
    assert four < two


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("params,size,why", [
    ("dims=8x6", 48, "dims must be powers of two >= 2 joined by 'x'"),
    ("dims=8x", 64, "dims must be powers of two"),
    ("dims=8x8", 32, "dims 8x8 is a torus of 64 ranks, not 32"),
    ("ports=3", 8, r"ports must be 1 to 2 \(twice the torus's dimensions\), got 3"),
    ("dims=4x4,ports=5", 16, "ports must be 1 to 4"),
    ("ports=0", 8, "ports must be 1 to 2")])
def test_bad_tori_and_ports_are_clear_errors(name, params, size, why):
    with pytest.raises(ValueError, match=why):
        pyar.schedule(f"{name}:{params}", size, 100).steps(0)
