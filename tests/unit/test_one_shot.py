"""one_shot: every rank ends with the rank-order fold's bits, its table equals its builder, its
traffic and steps are the docstring's, its closed form is the model's path, and it holds at
1,024 ranks."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyar
from pyar.algorithms import builder
from pyar.core.schedule import Table
from pyar.model import cost

PARAMS = cost.Params(alpha=2.0**-10, beta=2.0**-20, gamma={"float32": 2.0**-24}, delta=2.0**-12)
SLOW_LINK = cost.Params(alpha=1e-9, beta=1e-6, gamma={"float32": 3e-6}, delta=5e-5)


def spread(size, count, seed):
    """float32 values of magnitudes 1e-6 .. 1e6 and both signs: sums depend on their order."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(count) * 10.0 ** rng.integers(-6, 7, count)).astype(np.float32)
            for _ in range(size)]


def rank_order(xs):
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = acc + x
    return acc


def rank_order_bits_everywhere(size, count):
    """Simulate one_shot on ``spread`` inputs; assert every rank holds the rank-order fold's
    bits; the inputs and those bits."""
    xs = spread(size, count, seed=size)
    out = pyar.simulate(pyar.schedule("one_shot", size, count), xs).outputs
    want = rank_order(xs).view(np.uint32)
    assert all(np.array_equal(o.view(np.uint32), want) for o in out)
    return xs, want


@pytest.mark.parametrize("size", range(1, 65))
def test_every_rank_has_the_bits_of_the_rank_order_fold(size):
    xs, want = rank_order_bits_everywhere(size, 37)
    if size >= 3:       # the data tells the orders apart: a rank starting from its own differs
        own_first = rank_order([xs[-1], *xs[:-1]]).view(np.uint32)
        assert not np.array_equal(own_first, want)


def test_the_fold_order_shows_in_the_bits():
    """Three values whose sum depends on its order: one_shot gives (x0 + x1) + x2 on every
    rank, where a rank starting from its own value would not."""
    xs = [np.array([v], np.float32) for v in (1.0, 2.0**24, -(2.0**24))]
    assert rank_order(xs)[0] == 0.0 and (xs[1] + xs[2] + xs[0])[0] == 1.0
    out = pyar.simulate(pyar.schedule("one_shot", 3, 1), xs).outputs
    assert [o[0] for o in out] == [0.0, 0.0, 0.0]


@settings(max_examples=60)
@given(n=st.integers(1, 40), count=st.integers(0, 50))
def test_the_table_equals_the_per_rank_builder(n, count):
    make = builder("one_shot")
    want = Table.of([make(r, n, count) for r in range(n)])
    got = make.table(n, count)
    for column, a, b in zip(Table._fields, want, got):
        assert np.array_equal(a, b), column


@pytest.mark.parametrize("size", [2, 3, 4, 5, 8, 13, 33])
def test_two_steps_and_one_buffer_to_every_peer(size):
    count = 101
    s = pyar.schedule("one_shot", size, count)
    stats = pyar.simulate(s, spread(size, count, seed=0)).stats
    for r, rank in enumerate(stats):
        # messages to itself (rank r > 0's copy, every rank's folds) are not traffic
        assert (rank.steps, rank.messages) == (2, size - 1), r
        assert rank.bytes_sent == rank.bytes_received == 4 * (size - 1) * count, r
        assert s.scratch_count(r) == (size - 1) * count, r


def test_degenerate_cases_have_no_steps():
    make = builder("one_shot")
    assert make(0, 1, 10) == [] and make(2, 4, 0) == []
    x = np.arange(5, dtype=np.float32)
    assert np.array_equal(pyar.simulate(pyar.schedule("one_shot", 1, 5), [x]).outputs[0], x)


@pytest.mark.parametrize("n", [*range(2, 34), 64])
def test_the_closed_form_is_the_models_path(n):
    count = 48
    closed = cost.formula("allreduce", "one_shot", n, count, "float32")
    assert closed == (2 * n - 3, (2 * n - 3) * 4 * count, (n - 1) * 4 * count, 2)
    s = pyar.schedule("one_shot", n, count)
    for params in (PARAMS, SLOW_LINK):
        assert cost.predict(s, params).terms == closed


@pytest.mark.parametrize("size", [255, 1024])
def test_large_rank_counts(size):
    rank_order_bits_everywhere(size, 3)
