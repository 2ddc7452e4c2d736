"""The public API on one rank: the x/out contract, local errors, algorithm selection."""

import numpy as np
import pytest
from mpi4py import MPI

import pyar
from pyar.model import tuner


@pytest.mark.parametrize("dtype", ["int32", "float16", "bfloat16"])
def test_single_rank_allreduce_is_a_copy_for_every_algorithm(dtype):
    x = np.arange(6).astype(dtype).reshape(2, 3)
    for algorithm in pyar.algorithms():
        for op in ("sum", "avg") if dtype != "int32" else ("sum",):
            y = pyar.allreduce(x, op=op, algorithm=algorithm)
            assert y is not x and y.shape == (2, 3) and y.dtype == x.dtype
            assert y.tobytes() == x.tobytes()


def test_out_contract():
    x = np.arange(6.0).reshape(2, 3)
    out = np.zeros_like(x)
    assert pyar.allreduce(x, out) is out and np.array_equal(out, x)
    assert pyar.allreduce(x, x) is x
    strided = np.zeros((2, 6))[:, ::2]
    assert pyar.allreduce(x, strided, op="avg") is strided and np.array_equal(strided, x)
    view = np.arange(12.0)[::2]
    assert np.array_equal(pyar.allreduce(view, view), np.arange(12.0)[::2])


@pytest.mark.parametrize("call, error, message", [
    (lambda: pyar.allreduce(np.ones(3), np.ones(4)), ValueError, r"shape \(3,\) and dtype"),
    (lambda: pyar.allreduce(np.ones(3), np.ones(3, np.float32)), ValueError, "dtype float64"),
    (lambda: pyar.allreduce(np.ones(3), [0, 0, 0]), TypeError, "out must be a numpy array"),
    (lambda: pyar.allreduce([1, 2, 3]), TypeError, "x must be a numpy array or a cupy.*got list"),
    (lambda: pyar.allreduce(np.ones(3), op="xor"), ValueError, r"op must be one of \['sum'"),
    (lambda: pyar.allreduce(np.ones(3), op=MPI.BAND), ValueError, "op must be one of"),
    (lambda: pyar.allreduce(np.ones(3), algorithm="nope"), ValueError,
     "registered: bine, binomial, double_binary_tree, hierarchical, knomial, naive, one_shot, "
     "rabenseifner, recexch, recursive_doubling, ring, segmented_ring, swing_bandwidth, "
     "swing_latency, two_shot, mpi"),
    (lambda: pyar.allreduce(np.ones(3, np.int32), op="avg"), TypeError, "avg.*floating"),
    (lambda: pyar.allreduce(np.ones(3, np.complex128)), TypeError,
     "expected one of: int8, .*, float16, bfloat16, float32, float64"),
    (lambda: pyar.allreduce(np.ones(3, np.complex64)), TypeError, "complex64 is not supported"),
    (lambda: pyar.allreduce(np.ones(3, bool)), TypeError, "expected one of"),
    (lambda: pyar.allreduce(np.ones(3), comm="world"), TypeError, "mpi4py communicator"),
    (lambda: pyar.allreduce(np.ones(3, np.float16), reduce_dtype="float64"), ValueError,
     "reduce_dtype must be None or float16 or float32 for float16 data, got 'float64'"),
    (lambda: pyar.allreduce(np.ones(3), reduce_dtype=np.float32), ValueError,
     "reduce_dtype must be None or float64 for float64 data"),
    (lambda: pyar.collective("allgather", np.ones(3), reduce_dtype="float32"), ValueError,
     "reduce_dtype is for a reduction, not 'allgather'"),
])
def test_local_misuse_gets_a_clear_error(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_out_is_untouched_when_the_call_fails():
    out = np.zeros(3, np.int32)
    with pytest.raises(TypeError):
        pyar.allreduce(np.ones(3, np.int32), out, op="avg")
    with pytest.raises(ValueError):
        pyar.allreduce(np.ones(3, np.int32), out, algorithm="nope")
    assert not out.any()


def test_read_only_out_and_untouched_input():
    x = np.arange(4.0)
    x.flags.writeable = False
    assert np.array_equal(pyar.allreduce(x), x)
    with pytest.raises(ValueError, match="read-only"):
        pyar.allreduce(x, x)


def test_explicit_argument_beats_pyar_algo_which_beats_auto(monkeypatch):
    monkeypatch.setenv("PYAR_ALGO", "ring")
    assert tuner.select("allreduce", "auto", 8, 1 << 20, 4 << 20) == "ring"
    assert tuner.select("allreduce", "binomial", 8, 1 << 20, 4 << 20) == "binomial"
    monkeypatch.setenv("PYAR_ALGO", "allgather:bruck; allreduce:naive")
    assert tuner.select("allreduce", "auto", 8, 16, 64) == "naive"
    monkeypatch.setenv("PYAR_ALGO", "allgather:bruck")
    assert tuner.select("allreduce", "auto", 8, 16, 64) == "recursive_doubling"
    monkeypatch.setenv("PYAR_ALGO", "nope")
    with pytest.raises(ValueError, match="PYAR_ALGO='nope': no collective has an algorithm 'nope'"):
        tuner.select("allreduce", "auto", 8, 16, 64)


def test_pyar_algo_reaches_allreduce(monkeypatch):
    monkeypatch.setenv("PYAR_ALGO", "allreduce:naive")
    assert np.array_equal(pyar.allreduce(np.ones(4)), np.ones(4))
    monkeypatch.setenv("PYAR_ALGO", "allreduce:bogus")
    with pytest.raises(ValueError, match="PYAR_ALGO"):
        pyar.allreduce(np.ones(4))


def test_errors_share_a_base():
    assert issubclass(pyar.TimeoutError, pyar.PyarError)
    assert issubclass(pyar.TimeoutError, TimeoutError)
    assert issubclass(pyar.ScheduleError, pyar.PyarError)
    assert issubclass(pyar.MismatchError, pyar.PyarError)


def test_comm_is_cached_on_the_communicator():
    world = pyar.Comm.of(None)
    assert world is pyar.Comm.of(MPI.COMM_WORLD) is pyar.Comm.of(world)
    assert world.mpi != MPI.COMM_WORLD and world.size == MPI.COMM_WORLD.size
    with pytest.raises(TypeError, match="intracommunicator|mpi4py"):
        pyar.Comm(MPI.COMM_NULL)


def test_a_repeated_call_sees_a_re_registered_algorithm_and_pyar_algo(scratch_registry,
                                                                      monkeypatch):
    """Repeated signatures run their cached requests, but never across a change of builder or
    of PYAR_ALGO."""
    from mpi4py import MPI
    x = np.arange(5.0)

    @pyar.register_algorithm("t_repeat")
    def nothing(rank, size, count, topology=None):
        return []

    for _ in range(3):
        assert pyar.allreduce(x, algorithm="t_repeat", comm=MPI.COMM_SELF).tolist() == x.tolist()

    @pyar.register_algorithm("t_repeat")
    def broken(rank, size, count, topology=None):
        raise ValueError("the new builder ran")

    with pytest.raises(ValueError, match="the new builder ran"):
        pyar.allreduce(x, algorithm="t_repeat", comm=MPI.COMM_SELF)
    for _ in range(2):
        pyar.allreduce(x, comm=MPI.COMM_SELF)
    monkeypatch.setenv("PYAR_ALGO", "t_repeat")
    with pytest.raises(ValueError, match="the new builder ran"):
        pyar.allreduce(x, comm=MPI.COMM_SELF)


def test_a_repeated_signature_still_checks_what_may_differ():
    """A repeated signature runs its cached request (pyar.runtime.persistent.call), never
    skipping what could differ: shape, dtype, op, and an out reshaped or retyped in place
    since it was bound."""
    from mpi4py import MPI
    x = np.arange(6.0)
    for _ in range(3):
        assert np.array_equal(pyar.allreduce(x, comm=MPI.COMM_SELF), x)
    for _ in range(2):
        reshaped = pyar.allreduce(x.reshape(2, 3), comm=MPI.COMM_SELF)
        assert reshaped.shape == (2, 3)
    for _ in range(2):
        assert pyar.allreduce(x.astype(np.float32), comm=MPI.COMM_SELF).dtype == np.float32
    for _ in range(2):
        assert pyar.allreduce(x, op="max", comm=MPI.COMM_SELF).tolist() == x.tolist()
    out = np.zeros(6)
    for _ in range(3):          # the second call binds the plan to out's own memory
        assert pyar.allreduce(x, out, comm=MPI.COMM_SELF) is out and np.array_equal(out, x)
    out.shape = (2, 3)
    with pytest.raises(ValueError, match="out must have"):
        pyar.allreduce(x, out, comm=MPI.COMM_SELF)
    out.shape = (6,)
    out.dtype = np.int64        # the same bytes, seen as another dtype
    with pytest.raises(ValueError, match="out must have"):
        pyar.allreduce(x, out, comm=MPI.COMM_SELF)


def test_repeated_calls_honour_every_out_contract():
    from mpi4py import MPI
    x = np.arange(6.0).reshape(2, 3)
    for _ in range(3):
        new = pyar.allreduce(x, comm=MPI.COMM_SELF)
        assert new is not x and np.array_equal(new, x)
        out = np.zeros_like(x)
        assert pyar.allreduce(x, out, comm=MPI.COMM_SELF) is out and np.array_equal(out, x)
        strided = np.zeros((2, 6))[:, ::2]
        assert pyar.allreduce(x, strided, comm=MPI.COMM_SELF) is strided
        assert np.array_equal(strided, x)
        y = x.copy()
        assert pyar.allreduce(y, y, comm=MPI.COMM_SELF) is y and np.array_equal(y, x)
        with pytest.raises(ValueError, match="out must have"):
            pyar.allreduce(x, np.zeros(6), comm=MPI.COMM_SELF)
        frozen = np.zeros_like(x)
        frozen.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            pyar.allreduce(x, frozen, comm=MPI.COMM_SELF)
    bound = x.copy()
    for _ in range(3):          # the second call binds the plan to bound's own memory
        assert pyar.allreduce(bound, bound, comm=MPI.COMM_SELF) is bound
    bound.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pyar.allreduce(bound, bound, comm=MPI.COMM_SELF)


@pytest.mark.parametrize("call", [
    lambda x: pyar.allreduce(x), lambda x: pyar.reduce_scatter(x), lambda x: pyar.allgather(x),
    lambda x: pyar.reduce(x), lambda x: pyar.bcast(x), lambda x: pyar.alltoall(x[None])],
    ids=["allreduce", "reduce_scatter", "allgather", "reduce", "bcast", "alltoall"])
def test_a_non_native_byte_order_is_named_with_its_fix(call):
    """'>f4' is float32 in the other byte order, which the supported list names."""
    with pytest.raises(TypeError, match=r"x has dtype >f4: non-native byte order; "
                                        r"use x.astype\('=f4'\)"):
        call(np.ones(3, ">f4"))
    with pytest.raises(TypeError, match=r"out has dtype >i8: non-native byte order; "
                                        r"use out.astype\('=i8'\)"):
        pyar.allreduce(np.ones(3, np.int64), np.ones(3, ">i8"))


@pytest.mark.parametrize("call", [lambda x: pyar.allreduce(x, x), lambda x: pyar.reduce(x, x),
                                  lambda x: pyar.alltoall(x, x)],
                         ids=["allreduce", "reduce", "alltoall"])
def test_a_read_only_x_worked_in_place_is_named_x(call):
    """With ``out=x`` the read-only array is x (the message said "out")."""
    x = np.arange(4.0).reshape(1, 4)
    x.flags.writeable = False
    with pytest.raises(ValueError, match=r"^x is read-only, so the result cannot be written "
                                         r"into it \(out=x, in place\)"):
        call(x)
    out = np.zeros_like(x)
    out.flags.writeable = False
    with pytest.raises(ValueError, match="^out is read-only"):
        pyar.allreduce(x, out)


def test_a_root_for_a_collective_without_one_is_an_error():
    """pyar.collective("reduce_scatter", x, root=2) returned x's block unreduced."""
    with pytest.raises(ValueError, match="root is for .*'reduce', .*not 'reduce_scatter'"):
        pyar.collective("reduce_scatter", np.ones(4), root=1, comm=MPI.COMM_SELF)
