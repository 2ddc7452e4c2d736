"""two_shot: its table equals its builder, its traffic and steps are the docstring's, its
closed form bounds the model's path from below, and it holds at 1,024 ranks."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyar
from pyar.model import cost
from pyar.algorithms import builder
from pyar.core.schedule import Table

PARAMS = cost.Params(alpha=2.0**-10, beta=2.0**-20, gamma={"float32": 2.0**-24}, delta=2.0**-12)


def inputs(size, count, dtype=np.int64):
    """Rank r's element i is (r+1)*1000+i: a missing or doubled contribution shows."""
    return [((r + 1) * 1000 + np.arange(count)).astype(dtype) for r in range(size)]


@settings(max_examples=60)
@given(n=st.integers(1, 40), count=st.integers(0, 200))
def test_the_table_equals_the_per_rank_builder(n, count):
    make = builder("two_shot")
    want = Table.of([make(r, n, count) for r in range(n)])
    got = make.table(n, count)
    for column, a, b in zip(Table._fields, want, got):
        assert np.array_equal(a, b), column


@pytest.mark.parametrize("size", [100, 255, 1000, 1024])
def test_large_rank_counts(size):
    count = 3 * size + 7
    xs = inputs(size, count)
    out = pyar.simulate(pyar.schedule("two_shot", size, count), xs).outputs
    want = np.sum(xs, axis=0)
    assert all(np.array_equal(o, want) for o in out)


@pytest.mark.parametrize("size", [2, 3, 4, 5, 7, 8, 13, 16, 33])
def test_two_steps_and_ring_traffic(size):
    count = 1000 * size + 3                  # uneven: blocks of 1000 and 1001
    stats = pyar.simulate(pyar.schedule("two_shot", size, count), inputs(size, count)).stats
    for r, s in enumerate(stats):
        block = count // size + (r < count % size)
        assert (s.steps, s.messages) == (2, 2 * (size - 1)), r
        # reduce-scatter: every block but r's, once; allgather: block r to N-1 ranks
        assert s.bytes_sent == 8 * ((count - block) + (size - 1) * block), r
        assert s.bytes_received == 8 * ((size - 1) * block + (count - block)), r


@pytest.mark.parametrize("n", [*range(2, 18), 64])
def test_the_closed_form_is_the_ideal_ports_the_model_finds_more(n):
    """The closed form (``exact=False``) is each port busy ``N-1`` message times a step; the
    model hands ports out in the order messages were matched and finds a longer path, equal
    only at 2 ranks. Steps, bytes folded on the path: the same."""
    count = 2 * n * 16
    closed = cost.formula("allreduce", "two_shot", n, count, "float32")
    got = cost.predict(pyar.schedule("two_shot", n, count), PARAMS).terms
    assert (closed.steps, closed.folded) == (got.steps, got.folded) == (2, (n - 1) * 4 * 32)
    assert closed.messages == 2 * (n - 1) and closed.bytes == 2 * (n - 1) * 4 * 32
    assert closed.messages <= got.messages and closed.bytes <= got.bytes
    assert (closed == got) == (n == 2)
