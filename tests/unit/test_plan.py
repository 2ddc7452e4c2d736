"""pyar.runtime.plan without MPI: the out-of-place variants' bookkeeping of what is written, and
where a variant runs (its window of data)."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyar
from pyar.collectives import collective as record_of
from pyar.runtime.p2p import DATA, SOURCE, CopyStep
from pyar.runtime.plan import Plan, _Written

spans = st.tuples(st.integers(0, 40), st.integers(0, 40)).map(sorted)


@given(start=st.lists(spans, max_size=4), marks=st.lists(spans, max_size=8),
       asked=st.lists(spans, min_size=1, max_size=8))
def test_written_runs_answer_as_a_mask_would(start, marks, asked):
    mask = np.zeros(40, bool)
    for lo, hi in start:
        mask[lo:hi] = True
    written = _Written(start[:1])
    for lo, hi in start[1:]:        # (runs that may overlap: marked one by one)
        written.mark(lo, hi)
    for lo, hi in marks:
        written.mark(lo, hi)
        mask[lo:hi] = True
    for lo, hi in asked:
        part = mask[lo:hi]
        edges = np.flatnonzero(np.diff(np.concatenate(([True], part, [True]))))
        gaps = [(int(a) + lo, int(b) + lo) for a, b in zip(edges[::2], edges[1::2])]
        assert written.unwritten(lo, hi) == gaps
        assert written.any(lo, hi) == bool(part.any())
        assert written.all(lo, hi) == bool(part.all())


def _used(plan):
    """The data elements the plan's steps touch, as (lo, hi) runs."""
    used = [(s.lo, s.hi) for _, sends, recvs in plan.spans
            for s in [*sends, *(r.wire for r in recvs), *(r.dst for r in recvs)]
            if s is not None and s.buf == DATA and s.lo < s.hi]
    return used + [r for step in plan.steps if isinstance(step, CopyStep) for r in step.ranges]


@pytest.mark.parametrize("collective,algorithm,size,windowed", [
    ("reduce_scatter", "pairwise", 2, True), ("reduce_scatter", "pairwise", 5, True),
    ("reduce_scatter", "ring", 2, True), ("reduce_scatter", "ring", 4, False),
    ("reduce_scatter", "recursive_halving", 4, False), ("allreduce", "ring", 4, False),
    ("allgather", "ring", 3, False)])
def test_a_variant_runs_in_the_result_alone_where_it_uses_nothing_else(collective, algorithm,
                                                                      size, windowed):
    """A variant whose steps touch no element of data outside the result runs on the result's
    elements alone (its data spans moved down), reading every element of x it needs from x;
    otherwise it runs on all of data. Every rank alike."""
    record = record_of(collective)
    count = 1001 * size         # (allgather's: size blocks of x)
    for rank in range(size):
        plan = Plan(pyar.schedule(algorithm, size, count, collective=collective), rank)
        filled, kept = record.direct(count, size, rank, 0)
        variant = plan.out_of_place(filled, kept)
        assert variant is plan.out_of_place(filled, kept)        # built once
        assert variant.window == (kept if windowed else slice(0, count))
        n = variant.window.stop - variant.window.start
        assert all(0 <= lo and hi <= n for lo, hi in _used(variant))
        sources = [s for _, sends, recvs in variant.spans
                   for s in [*sends, *(r.source for r in recvs)]
                   if s is not None and s.buf == SOURCE]
        assert sources and all(0 <= s.lo and s.hi <= filled.stop - filled.start
                               for s in sources)
