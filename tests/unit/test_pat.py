"""PAT: both collectives at 1..64 ranks and up to 1,024 under several caps, the fold order of
the reduce-scatter, steps and bytes per rank against the module docstring's formulas."""

import functools
import time

import numpy as np
import pytest

import pyar
from pyar import collectives
from pyar.algorithms import algorithm, pat
from pyar.model import cost
from pyar.core.schedule import Table, build, split
from tiers import sizes_up_to_64, tiered


def schedule(collective, size, count, cap):
    """pat's schedule with ``cap`` (None too, which no ``pat:cap=`` name spells)."""
    builder = {"reduce_scatter": pat.pat_reduce_scatter, "allgather": pat.pat_allgather}
    made = functools.partial(builder[collective], cap=cap)
    made.table = functools.partial(builder[collective].table, cap=cap)
    return build(collective, "pat", size, count, made)


def caps(size, block):
    """No cap, none at all (0), one block, two blocks, half the power of two's blocks (in
    elements, for blocks of at most ``block`` elements)."""
    block = max(1, block)
    return [None, 0, block, 2 * block + 1, block * (1 << max(0, (size - 1).bit_length() - 1))]


def largest(collective, size, n):
    """The largest block for ``n`` elements of x per rank."""
    return n if collective == "allgather" else -(-n // size)


def run(collective, size, n, cap, dtype=np.int64):
    """Simulate with ``n`` elements of x per rank, rank r's element i ``(r+1)*1000+i``."""
    record = collectives.collective(collective)
    xs = [((r + 1) * 1000 + np.arange(n)).astype(dtype) for r in range(size)]
    result = pyar.simulate(schedule(collective, size, record.count(n, size), cap), xs)
    total = np.sum(xs, axis=0)
    for r, out in enumerate(result.outputs):
        want = (total[collectives.block(n, size, r)] if collective == "reduce_scatter"
                else np.stack(xs))
        assert np.array_equal(out, want), (collective, size, n, cap, r)
    if collective == "allgather":
        assert len({out.tobytes() for out in result.outputs}) == 1
    return result


def steps(collective, size, count, cap):
    """The docstring's step count: ``sum over D of ceil(n_D / A)``."""
    a = size if cap is None else max(1, cap // max(1, -(-count // size)))
    distances = [1 << j for j in range((size - 1).bit_length())]
    return sum(-(-(-(-(size - d) // (2 * d))) // a) for d in distances)


def children(size):
    """Children of each node x of a tree: ``x + D`` for D below x's lowest bit."""
    return [[x + (1 << j) for j in range(size.bit_length())
             if (x == 0 or (1 << j) < (x & -x)) and x + (1 << j) < size] for x in range(size)]


def sent(collective, size, count, rank):
    """The docstring's elements sent by ``rank``."""
    blocks = [b - a for a, b in split(count, size)]
    if collective == "reduce_scatter":
        return count - blocks[rank]
    return sum(len(c) * blocks[(rank - x) % size] for x, c in enumerate(children(size)))


@pytest.mark.parametrize("size", sizes_up_to_64())
@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather"])
def test_every_size_up_to_64_under_every_cap(collective, size):
    for n in (0, 1, size - 1, size, 3 * size + 1, 64):
        for cap in caps(size, largest(collective, size, n)):
            run(collective, size, n, cap)


@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather"])
@pytest.mark.parametrize("size", tiered([100, 255, 256, 1000, 1024], {100, 1024}))
def test_large_rank_counts_in_under_ten_seconds(collective, size):
    for cap in (None, 0, 3):
        start = time.perf_counter()
        run(collective, size, 2, cap)
        assert time.perf_counter() - start < 10, (collective, size, cap)


@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather"])
def test_steps_and_bytes_per_rank_are_the_docstrings(collective):
    record = collectives.collective(collective)
    for size in [*range(2, 34), 48, 64, 100]:
        for n in (1, size, 3 * size + 1, 7 * size):
            count = record.count(n, size) if collective == "allgather" else n
            for cap in caps(size, largest(collective, size, n)):
                s = schedule(collective, size, count, cap)
                result = pyar.simulate(s, np.float64, data=False)
                want = steps(collective, size, count, cap)
                for r, stats in enumerate(result.stats):
                    assert stats.bytes_sent == 8 * sent(collective, size, count, r), \
                        (collective, size, n, cap, r)
                    assert stats.steps <= want, (collective, size, n, cap, r)
                if count >= size:       # (else some blocks are empty and their steps left out)
                    assert max(st.steps for st in result.stats) == want, \
                        (collective, size, n, cap)
                assert all(st.messages <= size - 1 for st in result.stats)


def test_no_cap_is_a_logarithmic_count_of_steps_and_one_block_a_step_linear():
    for size in (5, 8, 13, 64):
        for collective in ("reduce_scatter", "allgather"):
            nsteps = schedule(collective, size, 64 * size, None).table().nsteps
            assert nsteps.max() == (size - 1).bit_length()
            assert schedule(collective, size, 64 * size, 1).table().nsteps.max() == size - 1


def tree_fold(xs, d, size):
    """Block d's sum in the order of its tree: node x folds its children, nearest first."""
    below = children(size)

    def subtree(x):
        acc = xs[(d + x) % size].copy()
        for child in below[x]:
            acc = acc + subtree(child)
        return acc
    return subtree(0)


@pytest.mark.parametrize("size", [2, 3, 5, 7, 8, 12, 13, 16, 31])
def test_reduce_scatter_folds_every_block_in_its_trees_order_whatever_the_cap(size):
    rng = np.random.default_rng(size)
    n = 5 * size + 2
    xs = [rng.standard_normal(n).astype(np.float32) for _ in range(size)]
    outputs = {cap: pyar.simulate(schedule("reduce_scatter", size, n, cap), xs).outputs
               for cap in caps(size, -(-n // size))}
    for r in range(size):
        want = tree_fold([x[collectives.block(n, size, r)] for x in xs], r, size)
        for cap, out in outputs.items():
            assert out[r].tobytes() == want.tobytes(), (size, cap, r)


def test_a_cap_that_is_no_size_is_refused():
    for bad in (-1, 1.5, "4"):
        with pytest.raises(ValueError, match="pat's cap"):
            pat.pat_reduce_scatter(0, 4, 16, cap=bad)
        with pytest.raises(ValueError, match="pat's cap"):
            pat.allgather_table(4, 16, cap=bad)


@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather"])
def test_the_table_form_is_the_builders_steps(collective):
    builder = {"reduce_scatter": pat.pat_reduce_scatter, "allgather": pat.pat_allgather}
    for size in (1, 2, 3, 5, 8, 12, 13, 33):
        for count in (0, 1, size - 1, 3 * size + 1):
            for cap in (None, 0, 1, 2, 5, 8):
                b = builder[collective]
                want = Table.of([b(r, size, count, cap=cap) for r in range(size)])
                got = b.table(size, count, cap=cap)
                assert all(np.array_equal(x, y) for x, y in zip(got, want)), \
                    (collective, size, count, cap)


@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather"])
def test_the_closed_form_is_the_schedules_cost_under_every_cap(collective):
    params = [cost.Params(alpha=2.0**-10, beta=2.0**-20, gamma={"float32": 2.0**-24},
                          delta=2.0**-12),
              cost.Params(alpha=1e-9, beta=1e-6, gamma={"float32": 3e-6}, delta=5e-5)]
    for size in (2, 3, 5, 7, 8, 12, 13, 16, 24, 33):
        count = 2 * size * (1 << (size.bit_length() - 1))
        for cap in caps(size, count // size):
            closed = pat._cost(size, count, 4 * count, None, cap=cap,
                               reduce=collective == "reduce_scatter")
            s = schedule(collective, size, count, cap)
            for p in params:
                assert tuple(cost.predict(s, p).terms) == tuple(closed), (collective, size, cap)


def test_a_parameterized_name_keeps_the_all_ranks_build():
    """``pat:cap=N`` through the registry builds every rank's schedule at once, as ``pat``
    does (a bare partial of the builder would build rank by rank)."""
    made = algorithm("pat:cap=4096", "reduce_scatter").builder
    assert made.table.keywords == {"cap": 4096}
    s = pyar.schedule("pat:cap=4096", 64, 64 * 100, collective="reduce_scatter")
    assert s.table().steps_of(5) == s.steps(5)
