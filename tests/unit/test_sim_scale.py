"""The simulator at scale: its Table, traffic-only mode, vectorized builders, fast inputs."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyar
from pyar import collectives, verify
from pyar.cli import sim as workbench
from pyar.algorithms import algorithms, builder
from pyar.core.schedule import Chunk, Recv, Send, Step, Table
from pyar.core.topology import Topology

from sim_cases import case

COLLECTIVES = [c for c in collectives.names()]
CASES = [(c, a) for c in COLLECTIVES for a in algorithms(c) if a != "mpi"]


@pytest.mark.parametrize("collective,name", CASES)
@settings(max_examples=12)
@given(n=st.integers(1, 19), c=st.integers(0, 40), root=st.integers(0, 18))
def test_traffic_only_and_data_modes_agree(collective, name, n, c, root):
    """Counts, bytes, steps of both modes are equal, and equal those of the step lists (a
    message to the rank itself is a local copy, no traffic)."""
    record, schedule, inputs = case(collective, name, n, c, root)
    full = pyar.simulate(schedule, inputs)
    bare = pyar.simulate(schedule, "int64", data=False)
    assert full.stats == bare.stats
    assert bare.outputs == [None] * n
    steps = [schedule.steps(r) for r in range(n)]
    for r, s in enumerate(full.stats):
        sends = [op for step in steps[r] for op in step.sends if op.peer != r]
        assert s.steps == len(steps[r]) and s.messages == len(sends), (r, s)
        assert s.bytes_sent == sum(op.chunk.count for op in sends) * 8


def test_both_modes_raise_the_same_errors(scratch_registry):
    everything = Chunk("data", 0, 4)
    broken = {
        "deadlock: rank 0 is stuck at step 0 waiting for peer 1":
            lambda r, n, c, t=None: [Step([Recv(1 - r, everything)]),
                                     Step([Send(1 - r, everything)])],
        "size mismatch: rank 1 step 0 receives 4 elements from peer 0, which sends 3":
            lambda r, n, c, t=None: [Step([Send(1, Chunk("data", 0, 3))])] if r == 0 else
            [Step([Recv(0, everything)])],
        "unmatched send: rank 0 step 1 sends to peer 1":
            lambda r, n, c, t=None: [Step([Send(1, everything)])] * 2 if r == 0 else
            [Step([Recv(0, everything)])],
        "unmatched receive: rank 0 step 1 receives from peer 1":
            lambda r, n, c, t=None: [Step([Recv(1, everything)])] * 2 if r == 0 else
            [Step([Send(0, everything)])],
    }
    for k, (message, build) in enumerate(broken.items()):
        pyar.register_algorithm(f"t_broken{k}")(build)
        schedule = pyar.schedule(f"t_broken{k}", 2, 4)
        for data in (True, False):
            inputs = [np.arange(4.0)] * 2 if data else None
            with pytest.raises(pyar.ScheduleError, match=message):
                pyar.simulate(schedule, inputs, data=data)


def test_a_send_completed_before_its_receive_delivers_what_was_sent(scratch_registry):
    # rank 0's send completes at once (rank 1 has posted the receive), then rank 0
    # overwrites the chunk; rank 1's step waits for rank 2 and must still get the old values
    a, b = Chunk("data", 0, 2), Chunk("data", 2, 4)

    def overwritten(rank, size, count, topology=None):
        if rank == 0:
            return [Step([Send(1, a)]), Step([Recv(2, a)])]
        if rank == 1:
            return [Step([Recv(0, a), Recv(2, b)])]
        return [Step([Send(0, a)]), Step([Send(1, b)])]
    pyar.register_algorithm("t_overwritten")(overwritten)
    inputs = [np.array([1, 2, 3, 4]), np.array([10, 20, 30, 40]), np.array([7, 8, 9, 6])]
    out = pyar.simulate(pyar.schedule("t_overwritten", 3, 4), inputs).outputs
    assert out[0].tolist() == [7, 8, 3, 4]
    assert out[1].tolist() == [1, 2, 9, 6]


@pytest.mark.parametrize("collective", ["allreduce", "reduce_scatter", "allgather"])
@settings(max_examples=40)
@given(n=st.integers(1, 40), count=st.integers(0, 200))
def test_vectorized_ring_table_equals_the_per_rank_builder(collective, n, count):
    make = builder("ring", collective)
    want = Table.of([make(r, n, count) for r in range(n)])
    got = make.table(n, count)
    for column, a, b in zip(Table._fields, want, got):
        assert np.array_equal(a, b), column
    assert all(got.steps_of(r) == make(r, n, count) for r in range(n))


@settings(max_examples=40)
@given(n=st.integers(1, 24), count=st.integers(0, 200), segment=st.integers(1, 9),
       per_node=st.integers(1, 30))
def test_segmented_ring_and_one_node_hierarchical_tables_equal_the_builders(n, count, segment,
                                                                           per_node):
    topology = Topology.regular(n, per_node)
    cases = [("segmented_ring", builder("segmented_ring"), {"segment": segment}, None),
             ("hierarchical", builder("hierarchical"), {}, None),
             ("hierarchical", builder("hierarchical"), {}, topology)]
    for name, make, given_, where in cases:
        got = make.table(n, count, where, **given_)
        if got is None:         # several nodes: the per-rank builder's
            assert name == "hierarchical" and len(topology.nodes) > 1
            continue
        want = Table.of([make(r, n, count, where, **given_) for r in range(n)])
        for column, a, b in zip(Table._fields, want, got):
            assert np.array_equal(a, b), (name, column)


@settings(max_examples=30)
@given(n=st.integers(2, 12), root=st.integers(0, 11), count=st.integers(1, 30))
def test_a_rooted_table_renumbers_like_the_steps(n, root, count):
    s = pyar.schedule("binomial", n, count, collective="reduce", root=root % n)
    got = s.table()
    for r in range(n):
        assert got.steps_of(r) == s.steps(r)


@settings(max_examples=40)
@given(size=st.integers(1, 5), n=st.integers(0, 30000),
       dtype=st.sampled_from(["float32", "int32", "float16", "bfloat16", "uint8", "float64"]),
       op=st.sampled_from(["sum", "prod", "max", "min", "avg"]))
def test_samples_are_verify_sample_stacked(size, n, dtype, op):
    if op == "avg" and dtype not in ("float32", "float16", "bfloat16", "float64"):
        op = "sum"
    want = np.stack([verify.sample(r, n, dtype, op) for r in range(size)])
    got = workbench.samples(size, n, dtype, op)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8))


def test_overwrite_uses_the_inputs_as_buffers():
    s = pyar.schedule("ring", 5, 12)
    x = workbench.samples(5, 12, "int64", "sum")
    want = x.sum(axis=0)
    out = pyar.simulate(s, x, overwrite=True).outputs
    assert all(np.array_equal(o, want) for o in out)
    assert np.array_equal(x[3], want)          # the inputs now hold the results
    kept = workbench.samples(5, 12, "int64", "sum")
    pyar.simulate(s, kept)
    assert np.array_equal(kept, workbench.samples(5, 12, "int64", "sum"))


def test_progress_is_reported(monkeypatch):
    from pyar.model import sim
    clock = iter(range(0, 10_000, 2))
    monkeypatch.setattr(sim.time, "monotonic", lambda: next(clock))
    seen = []
    pyar.simulate(pyar.schedule("ring", 6, 12), "float32", data=False,
                  progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][1] == 6 * 10 and all(0 < d <= t for d, t in seen)


def test_the_wrong_check_finds_one_flipped_element():
    record = collectives.collective("allreduce")
    x = workbench.samples(4, 100, "float32", "sum")
    expected = workbench.reference(record, x, "sum")
    out = pyar.simulate(pyar.schedule("ring", 4, 100), x).outputs
    assert workbench.wrong(record, out, expected, "sum") == 0
    out[2][17] += 1
    assert workbench.wrong(record, out, expected, "sum") == 1
    out[0][3] += 1000
    assert workbench.wrong(record, out, expected, "sum") == 1 + 1 + 3   # rank 0, and 3 vs it


@settings(max_examples=300)
@given(st.lists(st.tuples(st.sampled_from(["data", "scratch"]), st.integers(0, 12),
                          st.integers(0, 6), st.booleans()), min_size=2, max_size=8))
def test_the_overlap_sweep_agrees_with_every_pair(spec):
    from pyar.core.schedule import _overlap
    recvs = [Recv(1, Chunk(b, lo, lo + n), reduce) for b, lo, n, reduce in spec]
    pairs = any(a.chunk.overlaps(b.chunk) and not (a.reduce and b.reduce)
                for i, a in enumerate(recvs) for b in recvs[i + 1:])
    assert _overlap(recvs) == pairs


def test_small_pages_turns_numpy_huge_pages_off_and_back():
    multiarray = pytest.importorskip("numpy._core.multiarray")
    was = multiarray._set_madvise_hugepage(True)
    try:
        with workbench.small_pages():
            assert not multiarray._get_madvise_hugepage()
        assert multiarray._get_madvise_hugepage()
    finally:
        multiarray._set_madvise_hugepage(was)
