"""Bine trees and butterflies: negabinary numerals, the tree's distances, every collective's
postcondition at 1..64 ranks and at up to 1,024, traffic and steps, and the estimates."""

import math

import numpy as np
import pytest

import pyar
from pyar import collectives
from pyar.model import cost
from pyar.algorithms import _bine, _swing
from tiers import sizes_up_to_64, tiered

COLLECTIVES = ["bcast", "reduce", "allreduce", "reduce_scatter", "allgather"]
PARAMS = cost.Params(alpha=2.0**-10, beta=2.0**-20, gamma={"float32": 2.0**-24}, delta=2.0**-12)
SLOW_LINK = cost.Params(alpha=1e-9, beta=1e-6, gamma={"float32": 3e-6}, delta=5e-5)


def inputs(size, n):
    """Rank r's element i is (r+1)*1000+i: a missing or doubled contribution shows."""
    return [((r + 1) * 1000 + np.arange(n)).astype(np.int64) for r in range(size)]


def run(collective, size, n, root=0):
    """Simulate bine's ``collective`` with ``n`` elements of x per rank; check every rank."""
    record = collectives.collective(collective)
    xs = inputs(size, n)
    schedule = pyar.schedule("bine", size, record.count(n, size), collective=collective,
                             root=root)
    result = pyar.simulate(schedule, xs)
    total = np.sum(xs, axis=0)                  # (the postcondition, once for all ranks)
    for r, out in enumerate(result.outputs):
        want = {"bcast": xs[root], "reduce": total if r == root else None, "allreduce": total,
                "reduce_scatter": total[collectives.block(n, size, r)],
                "allgather": np.stack(xs)}[collective]
        if want is None:
            assert out is None, (collective, size, r)
        else:
            assert np.array_equal(out, want), (collective, size, n, root, r)
    return result


def test_numerals_are_negabinary():
    for pof2 in (2, 4, 8, 64, 1024):
        digits = pof2.bit_length() - 1
        n = _bine.numerals(pof2)
        value = sum(((n >> d) & 1) * (-2) ** d for d in range(digits))
        assert (value % pof2 == np.arange(pof2)).all()
        assert sorted(n.tolist()) == list(range(pof2))
    assert [format(int(x), "03b") for x in _bine.numerals(8)] == \
        ["000", "001", "110", "111", "100", "101", "010", "011"]


@pytest.mark.parametrize("pof2", [2, 4, 8, 16, 64, 256])
def test_the_tree_flips_equal_low_digits_at_swings_distances(pof2):
    """Each rank but the root receives once, from the rank with its lowest k+1 numeral digits
    (all equal) flipped, |rho(k)| away; the root's children are rho(L-1), ..., rho(0) away."""
    digits = pof2.bit_length() - 1
    n = _bine.numerals(pof2)
    received = {0}
    for k in range(digits - 1, -1, -1):
        senders = sorted(received)
        for v in senders:
            child = _bine.flip(v, k, pof2)
            assert int(n[child]) == int(n[v]) ^ ((2 << k) - 1)
            assert min((child - v) % pof2, (v - child) % pof2) == abs(_swing.rho(k)) % pof2 \
                or pof2 == 2
            assert child not in received and _bine.receives_at(child, pof2) == k
            received.add(child)
    assert received == set(range(pof2))


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("size", sizes_up_to_64())
def test_every_size_up_to_64(collective, size):
    for n in (0, 1, size - 1, 3 * size + 1):
        run(collective, size, n)
    if collectives.collective(collective).rooted and size > 1:
        run(collective, size, 5, root=size - 1)
        run(collective, size, 5, root=size // 2)


@pytest.mark.parametrize("collective", COLLECTIVES)
@pytest.mark.parametrize("size", tiered([100, 255, 1000, 1024], {100, 1024}))
def test_large_rank_counts(collective, size):
    run(collective, size, 3 if collective == "allgather" else 2 * size + 5,
        root=size // 3 if collective in ("bcast", "reduce") else 0)


@pytest.mark.parametrize("size", [2, 4, 8, 16, 32, 64])
def test_the_butterflies_move_what_recursive_halving_and_doubling_do(size):
    k = int(math.log2(size))
    per_rank = 1000
    for collective, halves in (("reduce_scatter", 1), ("allgather", 1), ("allreduce", 2)):
        n = per_rank if collective == "allgather" else per_rank * size
        for s in run(collective, size, n).stats:
            assert s.steps == halves * k
            assert s.bytes_sent == halves * (size - 1) * per_rank * 8
            assert k <= s.messages <= halves * (2 * k - 1)       # a wrapped range is two


@pytest.mark.parametrize("size", [2, 3, 5, 8, 13, 16, 31])
def test_the_trees_move_what_binomial_trees_do(size):
    """Every rank but the root receives the buffer once (bcast) or sends it once (reduce); the
    root takes part in log2 P rounds, and no rank in more than ceil(log2 N)."""
    rounds, tree = math.ceil(math.log2(size)), size.bit_length() - 1
    m = 64 * 8
    bcast = run("bcast", size, 64, root=size - 1).stats
    assert bcast[size - 1].bytes_sent == tree * m and bcast[size - 1].steps == tree
    assert sum(s.bytes_sent for s in bcast) == (size - 1) * m
    assert all(s.bytes_received == m for r, s in enumerate(bcast) if r != size - 1)
    assert max(s.steps for s in bcast) <= rounds
    reduce = run("reduce", size, 64).stats
    assert reduce[0].bytes_received == tree * m and reduce[0].bytes_sent == 0
    assert all(s.bytes_sent == m for s in reduce[1:])
    assert max(s.steps for s in reduce) <= rounds


@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather", "allreduce"])
@pytest.mark.parametrize("n", [*range(2, 18), 32, 64])
def test_the_butterfly_estimates_are_within_two_percent_of_the_model(collective, n):
    count = 2 * n * (1 << (n.bit_length() - 1))
    s = pyar.schedule("bine", n, count, collective=collective)
    closed = cost.formula(collective, "bine", n, count, "float32")
    for params in (PARAMS, SLOW_LINK):
        exact = cost.predict(s, params)
        assert closed.steps == exact.terms.steps
        ratio = cost.Prediction.of(closed, params, params.gamma_of("float32"),
                                   4 * count).time / exact.time
        assert 0.98 <= ratio <= 1.02, (n, ratio)
