"""The collective family against the MPI library's own, at whatever size mpiexec gives.

The oracle is each record's ``library`` (MPI_Reduce_scatter with
numpy.array_split counts, MPI_Allgather, MPI_Reduce, MPI_Bcast, MPI_Alltoall)
on the same data: the one copy of the MPI call, which ``algorithm="mpi"``
also makes, so every schedule is held to it and a wrong ``library`` fails
them. Run with PYAR_RANKS_PER_NODE set, ``hierarchical`` and the Comm's
topology see several nodes.
"""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import pyar
from pyar.algorithms import algorithm as registered
from pyar.collectives import collective as record_of, records
from pyar.model.cost import RESIDENT_BYTES
from pyar.runtime.baseline import library_call
from pyar.runtime.library import wraps
from pyar.core.ops import DTYPES, HALF, Op, is_float
from pyar.verify import describe, mismatches, sample

from checks import agree, dtype_op_grid

# every collective that takes data but allreduce (test_allreduce.py), built in when collected
CASES = [(r.name, a) for r in records() if r.name != "allreduce" and r.count(1, 2) > 0
         for a in pyar.algorithms(r.name)] + [("bcast", "knomial:k=3"), ("reduce", "knomial:k=4")]


def gets_result(record, x, rank, size, root):
    """Whether ``rank`` gets a result: its postcondition is not None (off reduce's root)."""
    return record.expected([np.zeros(x.shape)] * size, rank, root, Op.SUM)[0] is not None


def oracle(comm, collective, x, op, root, library=False):
    """(expected, scale) on this rank from the MPI library's own collective; None off the root.
    Integers the library saturates (pyar.runtime.library.wraps): the record's postcondition on every
    rank's x, unless ``library`` (the library's own collective checked)."""
    record = record_of(collective)
    size, rank = comm.size, comm.rank
    x = np.ascontiguousarray(x)
    if record.reduces and x.dtype in HALF:      # MPI has no half types: the oracle works in float32
        x = x.astype(np.float32)
    shape = record.result_shape(x.shape, size, rank)
    if not record.out_of_place:                 # bcast: in place
        expected = x.copy()
        library_call(record, comm, expected, expected, None, root)()
    else:
        expected = np.empty(shape, x.dtype)
        library_call(record, comm, x, expected, op.reduction if record.reduces else None,
                     root)()
    scale = None
    if record.reduces:
        magnitude = np.abs(x.astype(np.float64))
        scale = np.empty(shape)
        library_call(record, comm, magnitude, scale,
                     (Op.PROD if op is Op.PROD else Op.SUM).reduction, root)()
    inputs = None                               # every rank's x, where numpy is the oracle
    if record.reduces and not library and not wraps(x.dtype, op.reduction):
        inputs = comm.allgather(x)              # (on every rank: collective)
    if not gets_result(record, x, rank, size, root):
        return None, None
    if inputs is not None:                      # wrapped around, in x's own dtype
        expected = record.expected(inputs, rank, root, op)[0].astype(x.dtype)
    elif record.reduces and op is Op.AVG:
        expected, scale = expected / size, scale / size
    return expected, scale


def call(collective, x, out, op, algorithm, root):
    record = record_of(collective)
    kw = {"algorithm": algorithm}
    if record.reduces:
        kw["op"] = op
    if record.rooted:
        kw["root"] = root
    if not record.out_of_place:                 # bcast: no out
        return getattr(pyar, collective)(x, **kw)
    return getattr(pyar, collective)(x, out, **kw)


def check(comm, collective, algorithm, x, op, root, what, out=None):
    """Run the collective (x is not modified by it unless in place) and hold it to the oracle.

    One collective verdict per call, whatever this rank's role (root or not)."""
    original = x.copy()
    expected, scale = oracle(comm, collective, original, op, root, algorithm == "mpi")
    result = call(collective, x, out, op, algorithm, root)
    if algorithm == "mpi" and record_of(collective).reduces and \
            not wraps(x.dtype, Op(op).reduction):
        return      # where it saturates, each of the library's paths may do so differently
    agree(comm, verdict(collective, result, expected, scale, op, comm.size, x.dtype) is None,
          f"{what}: {verdict(collective, result, expected, scale, op, comm.size, x.dtype)}")
    return result


def verdict(collective, result, expected, scale, op, size, dtype):
    """None if ``result`` is right, else what is wrong with it."""
    if expected is None:
        return None if result is None else "only the root gets a result"
    if result is None or result.shape != expected.shape or result.dtype != dtype:
        return f"shape/dtype {getattr(result, 'shape', None)} {getattr(result, 'dtype', None)}"
    bad = mismatches(result, expected, op, size, scale)
    if bad.size:
        return describe(result, expected, bad)
    if not record_of(collective).reduces and result.tobytes() != expected.tobytes():
        return "not bitwise the library's"
    return None


def ops_for(collective, dtype):
    if not record_of(collective).reduces:
        return [Op.SUM]
    return [op for op in Op if op is not Op.AVG or is_float(dtype)]


def shaped(collective, size, count):
    """x's shape for ``count`` elements per row: one row per rank where the record's x has
    rows (alltoall's)."""
    return (size, count) if len(record_of(collective).shapes(size, 1)[0]) > 1 else (count,)


@pytest.mark.sweep
@pytest.mark.parametrize("collective,algorithm", CASES)
def test_every_op_dtype_count_and_root(comm, collective, algorithm):
    roots = sorted({0, comm.size - 1}) if record_of(collective).rooted else [0]
    for dtype, op in dtype_op_grid(comm.size, lambda dtype: ops_for(collective, dtype)):
        for count in sorted({0, 1, comm.size - 1, 1000}):     # (a set: 1 once at 2 ranks)
            for root in roots:
                shape = shaped(collective, comm.size, count)
                x = sample(comm.rank, int(np.prod(shape)), dtype, op, seed=count).reshape(shape)
                check(comm, collective, algorithm, x, op, root,
                      f"{collective} {algorithm} {op} {dtype} count={count} root={root}")


BACK_TO_BACK = [("allreduce", a) for a in pyar.algorithms() if a == "mpi" or
                registered(a, "allreduce").auto] + \
    [(c, a) for c, a in CASES if record_of(c).rooted]


@pytest.mark.sweep
@pytest.mark.parametrize("collective,algorithm", BACK_TO_BACK)
def test_calls_back_to_back_each_get_their_own_data(comm, collective, algorithm):
    """40 small calls in a row with nothing else between them, checked afterwards: a rank that
    only sends (a leaf of reduce, the root of bcast) runs calls ahead of its peers, and
    must not overwrite a message (in a mailbox, or on the wire) before it is read."""
    root = comm.size - 1
    xs = [sample(comm.rank, 17, np.float64, Op.SUM, seed=i) for i in range(40)]
    results = [call(collective, x.copy(), None, Op.SUM, algorithm, root) for x in xs]
    wrong = []
    for i, (x, result) in enumerate(zip(xs, results)):
        expected, scale = oracle(comm, collective, x, Op.SUM, root)
        bad = verdict(collective, result, expected, scale, Op.SUM, comm.size, x.dtype)
        if bad:
            wrong.append(f"call {i}: {bad}")
    agree(comm, not wrong, f"{collective} {algorithm}: {wrong[:3]}")


DIRECT = [(c, a) for c, a in CASES if record_of(c).direct(4, 2, 0, 0) is not None]


@pytest.mark.sweep
@pytest.mark.parametrize("collective,algorithm", DIRECT)
def test_large_out_of_place_calls_read_x_itself(comm, collective, algorithm):
    """Above RESIDENT_BYTES, a call apart from x runs the plan's out-of-place variant, which
    reads x itself (reduce_scatter on 2 ranks runs in the result's buffer alone): every out
    form, x left alone, a persistent request's starts reading x anew, against the library."""
    record = record_of(collective)
    count = RESIDENT_BYTES // 2 + 3 * comm.size + 1     # (float64: through the senders' memory)
    root = comm.size - 1
    failures = []
    for i, (dtype, op) in enumerate([(np.float64, Op.SUM), (np.int32, Op.MAX),
                                     (HALF[1], Op.MIN)]):
        op = op if record.reduces else Op.SUM
        x = sample(comm.rank, count, dtype, op, seed=i)
        shape = record.result_shape(x.shape, comm.size, comm.rank)
        outs = {"new": None, "out": np.full(shape, 7, dtype),
                "strided": np.full(shape[:-1] + (2 * shape[-1],), 7, dtype)[..., ::2]}
        for form, out in outs.items():
            what = f"{collective} {algorithm} {np.dtype(dtype)} {op} {form}"
            try:
                result = check(comm, collective, algorithm, x, op, root, what, out)
                if out is not None and result is not None and result is not out:
                    failures.append(f"{what}: the result is not out")
            except AssertionError as e:
                failures.append(str(e))
    x = sample(comm.rank, count, np.float32, Op.SUM, seed=5)
    out = np.empty(record.result_shape(x.shape, comm.size, comm.rank), x.dtype)
    kw = {"root": root} if record.rooted else {}
    with getattr(pyar, f"{collective}_init")(x, out, algorithm=algorithm, **kw) as request:
        for start in range(3):
            x[...] = sample(comm.rank, count, np.float32, Op.SUM, seed=start)
            expected, scale = oracle(comm, collective, x, Op.SUM, root)
            request.start()
            bad = verdict(collective, request.wait(), expected, scale, Op.SUM, comm.size,
                          x.dtype)
            if bad:
                failures.append(f"{collective} {algorithm} persistent, start {start}: {bad}")
    agree(comm, not failures, "; ".join(failures[:2]))


LAYOUTS = ["new", "in_place", "out", "strided_new", "strided_in_place", "strided_out"]


@settings(max_examples=settings.default.max_examples * 2 // 3)     # 100 of 150
@given(case=st.sampled_from(CASES), op=st.sampled_from(list(Op)),
       dtype=st.sampled_from(DTYPES), layout=st.sampled_from(LAYOUTS),
       shape=st.one_of(st.tuples(st.integers(0, 2000)),
                       st.lists(st.integers(0, 7), min_size=2, max_size=3).map(tuple)),
       root=st.integers(0, 63), seed=st.integers(0, 2**16))
def test_property_against_the_library(comm, case, op, dtype, layout, shape, root, seed):
    collective, algorithm = case
    record = record_of(collective)
    if op is Op.AVG and not is_float(dtype) or not record.reduces:
        op = Op.SUM
    if len(record.shapes(comm.size, 1)[0]) > 1:         # alltoall: one row per rank
        shape = (comm.size, *shape[1:])
    if not record.out_of_place and not layout.endswith("in_place"):     # bcast
        layout = layout.replace("new", "in_place").replace("out", "in_place")
    if not record.in_place and layout.endswith("in_place"):             # allgather
        layout = layout.replace("in_place", "out")
    root %= comm.size
    data = sample(comm.rank, int(np.prod(shape)), dtype, op, seed).reshape(shape)
    if layout.startswith("strided") and shape[-1] > 0:
        wide = np.zeros(shape[:-1] + (2 * shape[-1],), dtype)
        wide[..., ::2] = data
        x = wide[..., ::2]
    else:
        x = data.copy()
    what = f"{collective} {algorithm} {op} {dtype} {layout} shape={shape} root={root}"
    out = None
    if layout.endswith("in_place"):
        out = x
    elif layout.endswith("out"):
        out_shape = record.result_shape(shape, comm.size, comm.rank)
        out = np.full(out_shape, 7, dtype)
        if layout == "strided_out" and out.ndim and out.shape[-1] > 0:
            out = np.full(out_shape[:-1] + (2 * out_shape[-1],), 7, dtype)[..., 1::2]
    result = check(comm, collective, algorithm, x, op, root, what, out)
    returned_out = out is None or out is x or result is None or result is out
    agree(comm, returned_out, f"{what}: must return out")
    agree(comm, out is x or np.array_equal(x, data), f"{what}: modified x")
    agree(comm, record.out_of_place or result is x, f"{what}: bcast returns x")


def test_root_and_count_mismatches_raise_everywhere(comm):
    """On a first call with these arguments, on a Comm of its own: no rank has a plan for
    them, so the ranks agree on them before any message and the Comm stays usable. (On a
    Comm where some ranks have one, the mismatch is caught mid-way, which leaves the Comm
    unusable: tests/mpi/test_desync.py.)"""
    if comm.size == 1:
        return
    c = pyar.Comm(comm)
    with pytest.raises(pyar.MismatchError, match="roots"):
        pyar.reduce(np.ones(4321), root=comm.rank % 2, algorithm="binomial", comm=c)
    with pytest.raises(pyar.MismatchError):
        pyar.allgather(np.ones(4321 + comm.rank % 2), algorithm="ring", comm=c)
    agree(comm, np.array_equal(pyar.allreduce(np.ones(3), comm=c), np.full(3, comm.size)))
    c.free()


def test_bad_arguments_are_local_errors(comm):
    with pytest.raises(ValueError, match=r"alltoall needs x.shape\[0\] =="):
        pyar.alltoall(np.ones((comm.size + 1, 2)))
    with pytest.raises(ValueError, match="root must be a rank"):
        pyar.bcast(np.ones(3), root=comm.size)
    with pytest.raises(ValueError, match="read-only"):
        x = np.ones(3)
        x.flags.writeable = False
        pyar.bcast(x)
    with pytest.raises(ValueError, match=r"out must have the block's shape"):
        pyar.reduce_scatter(np.ones(10 * comm.size), np.ones(3))
    with pytest.raises(ValueError, match=r"out must have the gathered shape"):
        pyar.allgather(np.ones(4), np.ones(4))


def test_barrier(comm):
    for algorithm in pyar.algorithms("barrier"):
        for _ in range(3):
            pyar.barrier(algorithm=algorithm)
    agree(comm, True)


def test_topology_follows_pyar_ranks_per_node(comm):
    import os
    per_node = os.environ.get("PYAR_RANKS_PER_NODE")
    topology = pyar.Comm.of(comm).topology
    if per_node:
        agree(comm, topology == pyar.Topology.regular(comm.size, int(per_node)), repr(topology))
    else:
        agree(comm, len(topology.nodes) == 1, f"one machine, one node: {topology!r}")


def test_reduce_scatter_in_a_non_contiguous_x_gives_the_block(comm):
    """``out is x`` with a strided x: x can't be the work buffer; the block comes back new."""
    wide = np.arange(2 * 12 * comm.size, dtype=np.float64)
    x = wide[::2]
    expected, _ = oracle(comm, "reduce_scatter", x.copy(), Op.SUM, 0)
    result = pyar.reduce_scatter(x, x, algorithm="ring")
    library = pyar.reduce_scatter(x, x, algorithm="mpi")
    agree(comm, result.shape == expected.shape and np.array_equal(result, expected)
          and np.array_equal(library, expected), f"{result} {library} vs {expected}")
