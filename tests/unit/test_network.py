"""Networks (pyar.model.network): routes on tori, fat trees and dragonflies checked by hand,
link loads of ring and recursive doubling against their formulas, the congestion charge of
the cost model, the machine files, `pyar sim --machine`, and a 1,024-rank simulation."""

import json
import time
from pathlib import Path

import numpy as np
import pytest

import pyar
from pyar import cli
from pyar.model import cost, network, tuner

ROOT = Path(__file__).resolve().parents[2]


def torus_hop(net, link):
    """``(from router, to router, dimension, +1 or -1)`` of a torus link, from its id."""
    dims = net.spec["dims"]
    nd = len(dims)
    v, rest = divmod(link, 2 * nd)
    d, minus = divmod(rest, 2)
    stride = int(np.prod(dims[:d]))
    pos = v // stride % dims[d]
    sign = -1 if minus else 1
    return v, v + ((pos + sign) % dims[d] - pos) * stride, d, sign


def test_torus_routes_checked_by_hand():
    net = network.torus([4, 4], 10)      # rank = x + 4 y; link (v * 2 + d) * 2 + (0 +, 1 -)
    assert net.route(0, 1) == [0]                   # +x
    assert net.route(0, 3) == [1]                   # -x: the short way round
    assert net.route(0, 2) == [0, 4]                # half-way: the + way, through (1, 0)
    assert net.route(0, 5) == [0, 6]                # x first, then +y from (1, 0)
    assert net.route(5, 0) == [(5 * 2) * 2 + 1, (4 * 2 + 1) * 2 + 1]     # -x, then -y
    assert net.route(0, 12) == [3]                  # -y across the wrap
    assert net.route(3, 3) == []
    ring = network.torus([8], 1)
    assert ring.route(0, 5) == [1, 15, 13]          # 0 -> 7 -> 6 -> 5, minus links
    assert [ring.link_name(x) for x in ring.route(6, 1)] == ["(6)->(7)", "(7)->(0)", "(0)->(1)"]


@pytest.mark.parametrize("dims", [[5], [5, 4], [3, 4, 2]])
def test_torus_routes_are_shortest_connected_and_dimension_ordered(dims):
    net = network.torus(dims, 1)
    n = net.size
    src, dst = np.divmod(np.arange(n * n), n)
    lengths, links = net.routes(src, dst)
    starts = np.cumsum(lengths) - lengths
    stride = np.cumprod([1] + dims[:-1])
    for s, d, at, k in zip(src.tolist(), dst.tolist(), starts.tolist(), lengths.tolist()):
        shortest = sum(min((d // st - s // st) % m, (s // st - d // st) % m)
                       for st, m in zip(stride.tolist(), dims))
        assert k == shortest, (s, d)
        here, last_dim = s, 0
        for link in links[at:at + k].tolist():
            v, w, dim, _ = torus_hop(net, link)
            assert v == here and dim >= last_dim, (s, d, link)
            here, last_dim = w, dim
        assert here == d


def test_fat_tree_routes_go_up_to_the_lowest_common_switch_and_down():
    net = network.fattree(4, 8, 50, oversubscription=2)
    n = 32
    assert net.route(3, 5) == [2 * 3, 2 * 5 + 1]                    # same leaf: 2 hops
    assert net.route(3, 9) == [2 * 3, 2 * n + 0, 2 * n + 2 + 1, 2 * 9 + 1]   # via the spine
    assert [net.link_name(x) for x in net.route(3, 9)] == [
        "rank 3 -> leaf 0", "leaf 0 -> spine", "spine -> leaf 1", "leaf 1 -> rank 9"]
    assert net.bw[2 * n] == 8 * 50 / 2 and net.bw[0] == 50    # uplinks 2:1 oversubscribed
    assert net.tier[2 * n:].tolist() == [2] * 8 and not net.tier[:2 * n].any()


def test_dragonfly_routes_are_minimal_local_global_local():
    net = network.dragonfly(4, 2, 2, 10, global_bw=5)     # 16 ranks, 2 per router
    names = [net.link_name(x) for x in net.route(0, 15)]
    assert names == ["rank 0 -> router 0", "router 0 -> router 1 (group 0)",
                     "group 0 -> group 3 (router 1 -> router 6)", "router 6 -> router 7 (group 3)",
                     "router 7 -> rank 15"]
    assert len(net.route(0, 1)) == 2                    # one router
    assert len(net.route(0, 2)) == 3                    # one group: one local hop
    assert net.tier[net.route(0, 15)].tolist() == [0, 1, 2, 1, 0]
    assert net.bw[net.route(0, 15)[2]] == 5


def traffic(name, size, count, net, collective="allreduce"):
    schedule = pyar.schedule(name, size, count, collective=collective)
    return schedule, pyar.simulate(schedule, data=False, network=net)


def test_ring_on_a_ring_loads_each_link_with_what_the_ring_sends_across_it():
    n, count = 8, 8 * 1000
    net = network.torus([n], 1)
    schedule, result = traffic("ring", n, count, net)
    sent = [s.bytes_sent for s in result.stats]
    assert sent == [2 * (n - 1) * count // n * 4] * n
    t = result.traffic
    for r in range(n):          # rank r sends everything to r + 1 over its + link, alone
        assert t.link_bytes[r * 2] == sent[r]
        assert t.link_bytes[r * 2 + 1] == 0
    assert t.hops.tolist() == [1] * (2 * (n - 1) * n)


def test_recursive_doubling_on_a_2d_torus_loads_far_links_as_the_formula_says():
    # step k exchanges all M bytes with rank ^ 2^k: distance 2^(k mod 3) along dimension
    # k // 3 of the 8x8 torus. A link is crossed by the senders of a window of 2^(k mod 3)
    # positions going its way, and some window holds only such senders: the most loaded
    # link of step k carries 2^(k mod 3) M; the sum over the six steps is 14 M.
    count = 1024
    m = count * 4
    net = network.torus([8, 8], 1)
    _, result = traffic("recursive_doubling", 64, count, net)
    steps, most, links = result.traffic.step_max()
    assert steps.tolist() == list(range(6))
    assert most.tolist() == [2 ** (k % 3) * m for k in range(6)]
    for k, link in enumerate(links.tolist()):
        assert torus_hop(net, link)[2] == k // 3
    hops = result.traffic.hops.reshape(64, 6)           # per rank, per step (send rows)
    assert hops.max(axis=0).tolist() == [1, 2, 4, 1, 2, 4]


def test_the_most_loaded_link_is_the_max_of_the_per_link_table():
    net = network.torus([8, 8], 1)
    for name in ("rabenseifner", "swing_bandwidth", "binomial"):
        _, result = traffic(name, 64, 4096, net)
        t = result.traffic
        assert t.link_bytes[t.max_link] == t.link_bytes.max() > 0
        per_link = np.bincount(t.step_links, t.step_bytes, net.bw.size)
        assert np.array_equal(per_link, t.link_bytes)
        steps, most, links = t.step_max()
        for s, b, link in zip(steps.tolist(), most.tolist(), links.tolist()):
            mine = t.steps == s
            assert b == t.step_bytes[mine].max()
            assert t.step_bytes[mine & (t.step_links == link)].tolist() == [b]


def test_the_cost_model_charges_each_step_for_its_most_loaded_link():
    # alpha, beta, gamma 0: recursive doubling on a ring of 8 takes M, 2M and 4M over 1 GB/s
    # plus the hops' latency (1, 2 and 4 hops of 1 us)
    count = 1 << 16
    m = count * 4
    params = cost.Params(0.0, 0.0, {"float32": 0.0}, network=network.torus([8], 1, 1e-6))
    schedule = pyar.schedule("recursive_doubling", 8, count)
    p = cost.predict(schedule, params)
    assert p.time == pytest.approx(7 * m / 1e9 + 7e-6)
    assert p.beta == pytest.approx(7 * m / 1e9) and p.alpha == pytest.approx(7e-6)
    # ring: one link each per step, 2(N-1) steps of M/N
    p = cost.predict(pyar.schedule("ring", 8, count), params)
    assert p.time == pytest.approx(14 * (m / 8 / 1e9 + 1e-6))
    # a rank's port still bounds a message: beta above the links' share
    slow = params._replace(beta=1e-8)
    assert cost.predict(schedule, slow).beta == pytest.approx(3 * m * 1e-8)
    # without a network: the port model alone, as before
    plain = cost.predict(schedule, params._replace(network=None, beta=1e-9))
    assert plain.time == pytest.approx(3 * m * 1e-9)
    # estimate costs the schedule when there is a network (closed forms know no links)
    assert cost.estimate("allreduce", "ring", 8, count, "float32", params)[1] == "schedule"


@pytest.mark.parametrize("name", ["torus-8x8", "fattree-64", "dragonfly-64"])
def test_the_example_machines_describe_64_ranks(name):
    params, info = tuner.machine(ROOT / "machines" / f"{name}.json")
    assert params.network.size == 64 and "description" in info


@pytest.mark.parametrize("entry, says", [
    ({"kind": "mesh", "dims": [8, 8], "link_bw": 1}, "kind"),
    ({"kind": "torus", "link_bw": 1}, "missing ['dims']"),
    ({"kind": "torus", "dims": [8, 8], "link_bw": 1, "speed": 2}, "unknown ['speed']"),
    ({"kind": "torus", "dims": [8, 1], "link_bw": 1}, "1 to 3 ints >= 2"),
    ({"kind": "torus", "dims": "8x8", "link_bw": 1}, "got '8x8'"),
    ({"kind": "torus", "dims": [8], "link_bw": -1}, "link_bw must be a number >= 0"),
    ({"kind": "fattree", "leaves": 2.5, "ranks_per_leaf": 4, "link_bw": 1}, "leaves must be"),
    ("torus 8x8", "an object"),
])
def test_a_machine_file_with_a_malformed_network_is_a_clear_error(tmp_path, entry, says):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": "pyar-tuning/1", "alpha": 1e-6, "beta": 1e-9,
                                "gamma": {"float32": 1e-10}, "delta": 0.0, "network": entry}))
    with pytest.raises(ValueError, match="network") as error:
        tuner.machine(path)
    assert says in str(error.value) and str(path) in str(error.value)


def test_a_schedule_larger_than_the_network_is_an_error():
    with pytest.raises(ValueError, match="does not fit"):
        traffic("ring", 16, 16, network.torus([2, 2], 1))


def test_pyar_sim_and_model_with_a_network(capsys):
    machine = str(ROOT / "machines" / "torus-8x8.json")
    assert cli.main(["sim", "--machine", machine, "-a", "ring,rabenseifner", "-N", "64",
                     "--count", "4096", "--no-data"]) == 0
    out = capsys.readouterr().out
    assert "# network: torus 8x8" in out and "busiest link" in out
    row = next(line for line in out.splitlines() if line.startswith("  ring "))
    assert "(0,0)->(1,0)" in row
    assert cli.main(["model", "--machine", machine, "-a", "ring", "--bytes", "64K"]) == 0
    out = capsys.readouterr().out
    assert "on 64 ranks" in out and "# network: torus 8x8" in out
    with pytest.raises(SystemExit) as stop:
        cli.main(["sim", "--machine", machine, "-a", "ring", "-N", "65"])
    assert stop.value.code == 2 and "do not fit" in capsys.readouterr().err


def test_1024_ranks_of_rabenseifner_on_a_32x32_torus_simulate_quickly():
    net = network.torus([32, 32], 50)
    start = time.perf_counter()
    schedule, result = traffic("rabenseifner", 1024, 1 << 20, net)
    seconds = time.perf_counter() - start
    print(f"1,024-rank rabenseifner on a 32x32 torus, routed: {seconds:.2f} s")
    assert seconds < 60
    assert result.traffic.hops.max() == 16        # (a partner rank ^ 2^k: one dimension)


def test_nodes_on_a_switch_route_through_the_node_hub_and_its_nic():
    net = network.switch(4, 2, 25, intra_bw=100)      # 8 ranks; NIC links 25 GB/s
    assert [net.link_name(x) for x in net.route(0, 1)] == ["rank 0 -> node 0", "node 0 -> rank 1"]
    assert [net.link_name(x) for x in net.route(0, 7)] == [
        "rank 0 -> node 0", "node 0 -> spine", "spine -> node 3", "node 3 -> rank 7"]
    assert net.bw[net.route(0, 7)].tolist() == [100, 25, 25, 100]
    # with data moved too, the traffic is the same as without
    schedule = pyar.schedule("ring", 8, 64)
    inputs = np.ones((8, 64), np.float32)
    moved = pyar.simulate(schedule, inputs, network=net).traffic
    counted = pyar.simulate(schedule, data=False, network=net).traffic
    assert np.array_equal(moved.link_bytes, counted.link_bytes)
    # ranks 1, 3, 5, 7 send across nodes: 14 messages of 32 B each, over an up and a down link
    assert moved.tier_bytes(net)["global"] == 4 * 14 * 32 * 2
