"""recexch: every rank ends with the same bits for any N and k (and a rank folding in its own
order would not), its traffic is the docstring's, its closed form is the model's path for N a
power of k and an estimate otherwise, and it holds at 1,024 ranks."""

import numpy as np
import pytest

import pyar
from pyar.algorithms import algorithm
from pyar.algorithms.recexch import Layout
from pyar.core.schedule import Chunk, Recv, Schedule, Send, compact
from pyar.model import cost

PARAMS = cost.Params(alpha=2.0**-10, beta=2.0**-20, gamma={"float32": 2.0**-24}, delta=2.0**-12)
SLOW_LINK = cost.Params(alpha=1e-9, beta=1e-6, gamma={"float32": 3e-6}, delta=5e-5)


def floats(size, count, seed=0):
    """float32 of magnitudes 1e-4..1e4: the order of a sum shows in its last bits."""
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(count) * 10.0 ** rng.integers(-4, 5, count)).astype(np.float32)
            for _ in range(size)]


def same_bits(outputs):
    return all(np.array_equal(o.view(np.uint32), outputs[0].view(np.uint32)) for o in outputs)


def check(schedule, xs):
    out = pyar.simulate(schedule, xs).outputs
    assert same_bits(out)
    want = np.sum(np.asarray(xs, np.float64), axis=0)
    assert np.allclose(out[0], want, rtol=1e-5, atol=1e-2 * len(xs))


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8])
def test_every_rank_gets_the_same_bits_and_the_sum(k):
    for n in range(1, 65):
        check(pyar.schedule(f"recexch:k={k}", n, 9), floats(n, 9, seed=n))


@pytest.mark.parametrize("size", [100, 243, 255, 729, 1000, 1024])
def test_large_rank_counts(size):
    check(pyar.schedule("recexch:k=3", size, 4), floats(size, 4))


def own_first(rank, size, count, topology=None, *, k=3):
    """recexch's messages, but every rank folds its peers' vectors into its own data: MPICH's
    order, which starts each sum from the rank's own vector."""
    layout = Layout(size, k)
    data = Chunk("data", 0, count)
    me = layout.newrank(rank)
    if me < 0:
        partner = layout.partner(rank)
        return compact([[Send(partner, data)], [Recv(partner, data)]])
    steps, span = [[Recv(e, data, reduce=True) for e in layout.extras(rank)]], 1
    for _ in range(layout.phases):
        digit = me // span % layout.k
        peers = [layout.real(me + (i - digit) * span) for i in range(layout.k) if i != digit]
        steps.append([*(Send(p, data) for p in peers), *(Recv(p, data, True) for p in peers)])
        span *= layout.k
    return compact([*steps, [Send(e, data) for e in layout.extras(rank)]])


def test_folding_in_each_ranks_own_order_differs_in_the_last_bits():
    """The bitwise check is meaningful: on the same data, the own-first order gives ranks
    different bits where recexch's digit order gives them the same."""
    xs = floats(9, 256)
    assert not same_bits(pyar.simulate(Schedule("own_first", "allreduce", 9, 256, own_first),
                                       xs).outputs)
    check(pyar.schedule("recexch:k=3", 9, 256), xs)


@pytest.mark.parametrize("k", [2, 3, 4, 8])
@pytest.mark.parametrize("n", [2, 3, 5, 9, 12, 16, 30, 64])
def test_messages_and_bytes_per_rank_are_the_docstring_s(n, k):
    count = 10
    layout = Layout(n, k)
    stats = pyar.simulate(pyar.schedule(f"recexch:k={k}", n, count), floats(n, count)).stats
    for r, s in enumerate(stats):
        if layout.newrank(r) < 0:
            assert (s.messages, s.bytes_sent, s.steps) == (1, 4 * count, 2), r
            continue
        served = len(layout.extras(r))
        messages = layout.phases * (layout.k - 1) + served
        assert (s.messages, s.bytes_sent) == (messages, 4 * count * messages), r
        digits = [layout.newrank(r) // layout.k ** j % layout.k for j in range(layout.phases)]
        assert s.steps == layout.phases + sum(d >= 2 for d in digits) + 2 * (served > 0), r
    assert sum(layout.newrank(r) < 0 for r in range(n)) == n - layout.p


def test_mpich_s_layout():
    """N = 12, k = 3: ranks 0, 1 hand their data to 2 and rank 3 to rank T = 4; k is lowered
    to N below it."""
    layout = Layout(12, 3)
    assert (layout.p, layout.rem, layout.T) == (9, 3, 4)
    assert [layout.newrank(r) for r in range(6)] == [-1, -1, 0, -1, 1, 2]
    assert [layout.partner(r) for r in (0, 1, 3)] == [2, 2, 4]
    assert (layout.extras(2), layout.extras(4), layout.extras(5)) == ([1, 0], [3], [])
    assert [layout.real(v) for v in range(9)] == [2, 4, 5, 6, 7, 8, 9, 10, 11]
    assert (Layout(3, 8).k, Layout(2, 8).k, Layout(7, 8).k) == (3, 2, 7)


@pytest.mark.parametrize("k,n", [(2, 2), (2, 16), (2, 64), (3, 3), (3, 9), (3, 27), (4, 4),
                                 (4, 16), (4, 64), (5, 25), (7, 7), (7, 49), (8, 8), (8, 64),
                                 (16, 16), (16, 3)])
def test_the_closed_form_is_the_model_s_path_for_a_power_of_k(k, n):
    count = 2 * n * 16
    closed = cost.formula("allreduce", f"recexch:k={k}", n, count, "float32")
    schedule = pyar.schedule(f"recexch:k={k}", n, count)
    for params in (PARAMS, SLOW_LINK):
        assert closed == cost.predict(schedule, params).terms, params


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8])
def test_the_closed_form_is_an_estimate_otherwise(k):
    count = 64
    for n in range(2, 65):
        closed = cost.formula("allreduce", f"recexch:k={k}", n, count, "float32")
        schedule = pyar.schedule(f"recexch:k={k}", n, count)
        for params in (PARAMS, SLOW_LINK):
            exact = cost.predict(schedule, params)
            ratio = cost.Prediction.of(closed, params, params.gamma_of("float32"),
                                       4 * count).time / exact.time
            assert 0.8 <= ratio <= 1.5, (n, ratio)


def test_the_radix_is_checked_where_the_name_is_resolved():
    for bad in ("recexch:k=1", "recexch:k=x"):
        with pytest.raises(ValueError, match="k"):
            algorithm(bad)
    assert not algorithm("recexch").auto and not algorithm("recexch").exact
