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
