"""A collective defined in a test file alone works through api, sim, bench and verify.

``gather`` is not part of pyar: this file gives its record (what it is, the MPI
library's call, its postcondition) and one algorithm, ``linear``; nothing in
pyar names it. The simulator is checked here; tests/mpi/test_registered_collective.py
registers the same record on every rank and runs it through the API (the
algorithm and ``mpi``) and the bench.
"""

import numpy as np
import pytest

import pyar
import pyar.cli.bench
import pyar.collectives
from pyar.core import buffers
from pyar.algorithms import _registry
from pyar.collectives import Collective, Work
from pyar.runtime import baseline as mpi
from pyar.core.ops import Op
from pyar.core.schedule import Chunk, Recv, Send, compact, split
from pyar.verify import sample


class Gather(Collective):
    """gather: the root gets every rank's ``x``, stacked: shape ``(size, *x.shape)``; the
    other ranks get None.

    ``data`` is ``size`` blocks of x.size elements seen from the root: each rank's x
    in block 0, and on the root block k receives rank ``(root + k) % size``'s, so a
    schedule written for root 0 works for any root once its ranks are renumbered
    (:class:`pyar.core.schedule.Schedule`); :meth:`result` turns the blocks back into rank
    order.
    """

    name = "gather"
    rooted = True
    in_place = False
    blocked = True
    library_name = "comm.Gather"

    def factor(self, size):
        return (size - 1) / size        # nccl-tests' gather

    def count(self, x_size, size):
        return x_size * size

    def x_size(self, count, size):
        return count // size

    def result_shape(self, shape, size, rank):
        return (size, *shape)

    def load(self, x, rank, size):
        data = np.zeros(x.size * size, x.dtype)
        data[:x.size] = x.reshape(-1)
        return data

    def result(self, data, shape, rank, size, root):
        if rank != root:
            return None
        return np.roll(data.reshape((size, *shape)), root, axis=0)    # block k: rank root + k

    def prepare(self, x, out, rank, size, root, copy=True):
        shape = (size, *x.shape)
        if rank == root and out is not None:
            buffers.check_out(out, shape, x.dtype, "the gathered")
        data = self.load(x, rank, size)

        def finish():
            result = self.result(data, x.shape, rank, size, root)
            if result is None or out is None:
                return result
            out[...] = result
            return out
        return Work(data, None, finish)

    def library_buffers(self, x, work, rank, root):
        send = np.ascontiguousarray(x).reshape(-1)
        if rank != root:
            return send, None, None
        received = np.empty_like(work.data)
        size = work.data.size // x.size if x.size else 1

        def after():        # rank order into the root's view of data
            work.data[...] = np.roll(received.reshape(size, -1), -root, axis=0).reshape(-1)
        return send, received, after

    def library(self, comm, x, out, reduction, root, start=False):
        call = comm.Igather if start else comm.Gather
        here = [out, x.nbytes, mpi.BYTE] if comm.Get_rank() == root else None
        return call(mpi.as_bytes(x), here, root)

    def expected(self, inputs, rank, root, op):
        if rank != root:
            return None, None
        return np.stack([np.asarray(x) for x in inputs]), None

    def shapes(self, size, count):
        return (count,), (size, count)


GATHER = Gather()


def linear(rank, size, count, topology=None):
    """Linear gather, written for root 0: one step, every other rank sends its block 0 and
    the root receives rank k's into block k. Bytes sent per rank: M/N (the root: none).
    Cost: ``alpha + (N-1)/N * M * beta`` if the root takes every message at once."""
    blocks = [Chunk("data", lo, hi) for lo, hi in split(count, size)]
    if rank != 0:
        return compact([[Send(0, blocks[0])]])
    return compact([[Recv(peer, blocks[peer]) for peer in range(1, size)]])


def register():
    """Make gather and its algorithm known to pyar (every rank, in the same order)."""
    pyar.register_collective(GATHER)
    pyar.register_algorithm("linear", collective="gather", auto=True)(linear)


def unregister():
    pyar.collectives._records.pop(GATHER.name, None)
    _registry.pop(GATHER.name, None)


@pytest.fixture
def gather(scratch_registry):
    register()
    yield GATHER
    unregister()


def test_nothing_in_pyar_knows_gather_until_it_is_registered():
    assert "gather" not in pyar.collectives.names()
    with pytest.raises(ValueError, match="collective must be one of"):
        pyar.algorithms("gather")


def test_registering_makes_it_a_collective_with_its_algorithm(gather):
    assert pyar.collectives.collective("gather") is gather
    assert pyar.algorithms("gather") == ["linear", "mpi"]
    assert "gather" in pyar.collectives.names() and gather in pyar.collectives.records()
    assert "gather" in pyar.cli.bench.collectives()
    assert pyar.cli.bench.variants(gather) == ("out_of_place",)


@pytest.mark.parametrize("root_of", [lambda size: 0, lambda size: size - 1,
                                     lambda size: size // 2])
def test_simulated_schedule_gives_the_postcondition_on_every_rank(gather, root_of):
    for size in range(1, 9):
        root = root_of(size)
        for n in (0, 1, 5):
            for dtype in (np.int64, np.float32, np.uint8):
                xs = [sample(r, n, dtype, Op.SUM, seed=n).reshape(-1) for r in range(size)]
                if n == 5:
                    xs = [x[:4].reshape(2, 2) for x in xs]         # any shape
                schedule = pyar.schedule("linear", size, gather.count(xs[0].size, size),
                                         collective="gather", root=root)
                outputs = pyar.simulate(schedule, xs).outputs
                what = f"gather N={size} root={root} n={n} {np.dtype(dtype)}"
                for rank, out in enumerate(outputs):
                    want, _ = gather.expected(xs, rank, root, Op.SUM)
                    if want is None:
                        assert out is None, f"{what}: rank {rank} must get None"
                    else:
                        assert out.shape == want.shape and out.dtype == want.dtype, what
                        assert np.array_equal(out, want), f"{what}: rank {rank}: {out}"


def test_a_wrong_gather_is_caught(gather):
    """The postcondition tells: a gather that forgets the last rank's block fails it."""
    def forgetful(rank, size, count, topology=None):
        steps = linear(rank, size, count)
        if rank == 0:
            steps = compact([[op for op in steps[0].ops if op.peer != size - 1]])
        elif rank == size - 1:
            steps = []
        return steps

    pyar.register_algorithm("forgetful", collective="gather")(forgetful)
    xs = [np.arange(3) + 10 * (r + 1) for r in range(4)]
    out = pyar.simulate(pyar.schedule("forgetful", 4, 12, collective="gather"), xs).outputs[0]
    want, _ = gather.expected(xs, 0, 0, Op.SUM)
    assert not np.array_equal(out, want) and np.array_equal(out[:3], want[:3])


def test_the_api_checks_the_roots_out(gather):
    work = gather.prepare(np.ones(3), np.empty((4, 3)), 1, 4, 1)
    assert work.data.size == 12
    with pytest.raises(ValueError, match=r"out must have the gathered shape \(4, 3\)"):
        gather.prepare(np.ones(3), np.empty(3), 1, 4, 1)
    assert gather.prepare(np.ones(3), np.empty(3), 0, 4, 1).finish() is None     # not the root
