"""Every collective and algorithm, simulated, against numpy: sizes, counts, roots, ops, dtypes."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

import pyar
from pyar.collectives import collective as record_of, records
from pyar.core.ops import DTYPES, Op, is_float
from pyar.verify import describe, mismatches, sample
from tiers import sizes_up_to_64

# every algorithm of every collective that takes data but allreduce (tests/unit/test_algorithms.py)
CASES = [(r.name, a) for r in records() if r.name != "allreduce" and r.count(1, 2) > 0
         for a in pyar.algorithms(r.name) if a != "mpi"]
SAME_EVERYWHERE = {"allreduce", "allgather", "bcast"}     # every rank gets the same bits


def inputs_for(collective, size, count, op, dtype, seed=0):
    """Per-rank ``x``: ``count`` elements each, as ``(size, count // size)`` where the record's
    x has one row per rank (alltoall's)."""
    if len(record_of(collective).shapes(size, 1)[0]) > 1:
        count -= count % size
        return [sample(r, count, dtype, op, seed).reshape(size, -1) for r in range(size)]
    return [sample(r, count, dtype, op, seed) for r in range(size)]


def check(collective, algorithm, size, count, op=Op.SUM, dtype=np.int64, root=0, seed=0,
          topology=None):
    record = record_of(collective)
    xs = inputs_for(collective, size, count, op, dtype, seed)
    originals = [x.copy() for x in xs]
    n = record.count(xs[0].size, size)
    root = root if record.rooted else 0
    schedule = pyar.schedule(algorithm, size, n, collective=collective, root=root,
                             topology=topology)
    result = pyar.simulate(schedule, xs, op=op)
    what = f"{collective} {algorithm} N={size} count={count} root={root} {op} {np.dtype(dtype)}"
    for r, out in enumerate(result.outputs):
        want, scale = record.expected(xs, r, root, op)
        if want is None:
            assert out is None, f"{what}: rank {r} must get None"
            continue
        assert out.shape == want.shape and out.dtype == np.dtype(dtype), f"{what}: rank {r} shape"
        bad = mismatches(out, want, op, size, scale)
        assert bad.size == 0, f"{what}: rank {r}: {describe(out, want, bad)}"
    if collective in SAME_EVERYWHERE:
        assert len({out.tobytes() for out in result.outputs}) == 1, f"{what}: ranks differ"
    for x, original in zip(xs, originals):
        assert np.array_equal(x, original), f"{what}: simulate modified an input"
    return result


@pytest.mark.parametrize("size", sizes_up_to_64())
@pytest.mark.parametrize("collective,algorithm", CASES)
def test_every_size_up_to_64(collective, algorithm, size):
    for count in (0, 1, size - 1, size, 3 * size + 1, *[1000] * (size <= 16)):
        check(collective, algorithm, size, count, root=(size - 1) // 2)
    if size == 7:
        check(collective, algorithm, 7, 100, Op.SUM, np.float64, root=6)


@pytest.mark.parametrize("collective,algorithm", CASES)
def test_every_op_and_dtype(collective, algorithm):
    for dtype in DTYPES:
        for op in Op:
            if op is Op.AVG and not is_float(dtype) or \
                    not record_of(collective).reduces and op != Op.SUM:
                continue
            for size in (2, 5, 8):
                check(collective, algorithm, size, 3 * size + 2, op, dtype, root=size - 1)


@given(case=st.sampled_from(CASES), size=st.integers(1, 24), count=st.integers(0, 3000),
       op=st.sampled_from(list(Op)), dtype=st.sampled_from(DTYPES), root=st.integers(0, 23),
       seed=st.integers(0, 1000))
def test_property_against_numpy(case, size, count, op, dtype, root, seed):
    if op is Op.AVG and not is_float(dtype):
        op = Op.SUM
    check(*case, size, count, op, dtype, root % size, seed)


def test_simulated_outputs_have_the_collectives_shapes():
    xs = [np.arange(6.0).reshape(2, 3) + r for r in range(3)]
    out = pyar.simulate(pyar.schedule("ring", 3, 18, collective="allgather"), xs).outputs
    assert out[1].shape == (3, 2, 3) and np.array_equal(out[1][2], xs[2])
    out = pyar.simulate(pyar.schedule("ring", 3, 6, collective="reduce_scatter"), xs).outputs
    assert [o.tolist() for o in out] == [[3.0, 6.0], [9.0, 12.0], [15.0, 18.0]]
    out = pyar.simulate(pyar.schedule("binomial", 3, 6, collective="reduce", root=2), xs).outputs
    assert out[0] is None and out[1] is None and out[2].shape == (2, 3)


def test_simulate_asks_for_allgather_inputs_of_one_block():
    with pytest.raises(ValueError, match="rank 0 must have 3 elements"):
        pyar.simulate(pyar.schedule("ring", 2, 6, collective="allgather"), [np.ones(6)] * 2)


def test_root_must_be_a_rank_of_a_rooted_collective():
    with pytest.raises(ValueError, match=r"root must be a rank in \[0, 4\)"):
        pyar.schedule("binomial", 4, 10, collective="bcast", root=4)
    with pytest.raises(ValueError, match="root is for"):
        pyar.schedule("ring", 4, 10, collective="allgather", root=1)


def test_barrier_lets_no_rank_leave_before_every_rank_arrived():
    """Follow who has heard from whom through the messages: after its last step every rank
    has heard, directly or not, from every other rank."""
    for size in range(1, 40):
        schedule = pyar.schedule("dissemination", size, 0, collective="barrier")
        heard = [{r} for r in range(size)]
        for step in range(max(len(schedule.steps(r)) for r in range(size))):
            before = [set(h) for h in heard]
            for r in range(size):
                for op in schedule.steps(r)[step].recvs:
                    heard[r] |= before[op.peer]
        assert all(h == set(range(size)) for h in heard), f"N={size}: {heard}"
        pyar.simulate(schedule)


def test_barrier_that_skips_a_round_is_caught():
    """The check above fails for a barrier with its last round left out."""
    size = 8
    schedule = pyar.schedule("dissemination", size, 0, collective="barrier")
    heard = [{r} for r in range(size)]
    for step in range(len(schedule.steps(0)) - 1):
        before = [set(h) for h in heard]
        for r in range(size):
            for op in schedule.steps(r)[step].recvs:
                heard[r] |= before[op.peer]
    assert any(h != set(range(size)) for h in heard)
