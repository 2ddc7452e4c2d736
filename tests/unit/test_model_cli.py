"""`pyar model` (machines, --explain, --sweep, --plot) and --load in sim, model, bench, auto."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyar
from pyar import cli
from pyar.model import cost, tuner
from pyar.core import loader
from pyar.core.topology import Topology

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.usefixtures("scratch_registry")

# Round numbers, so that the critical paths below can be added up by hand.
EXAMPLE = {"format": "pyar-tuning/1", "alpha": 1e-6, "beta": 1e-9, "gamma": {"float32": 5e-10},
           "delta": 0.0, "eager": None}

TWO_SHOT = '''
"""Two-shot allreduce: direct reduce-scatter, then direct allgather (a user's algorithm)."""
import pyar
from pyar.core.schedule import Chunk, Recv, Send, Step, split


@pyar.register_algorithm("two_shot", auto=True)
def two_shot(rank, size, count, topology=None):
    if size == 1 or count == 0:
        return []
    blocks = [Chunk("data", lo, hi) for lo, hi in split(count, size)]
    others = [(rank + k) % size for k in range(1, size)]
    mine = blocks[rank]
    steps = []
    for peer in others:             # reduce-scatter: one exchange per peer
        steps.append(Step([Send(peer, blocks[peer]), Recv((2 * rank - peer) % size, mine,
                                                         reduce=True)]))
    steps.append(Step([*(Send(peer, mine) for peer in others),
                       *(Recv(peer, blocks[peer]) for peer in others)]))
    return [s for s in steps if all(op.chunk.hi > op.chunk.lo for op in s.ops)]
'''


def machine(tmp_path, **changes):
    path = tmp_path / "machine.json"
    path.write_text(json.dumps({**EXAMPLE, **changes}))
    return str(path)


def run(capsys, *argv):
    code = cli.main([str(a) for a in argv])
    out = capsys.readouterr().out
    assert code == 0, out
    return out


def explained(out):
    """(events as (term, +us), total us, rendezvous us) from --explain's output."""
    events = [(m[3], float(m[2])) for m in re.finditer(
        r"^\s+([\d.]+)\s+([\d.]+)\s+(alpha|beta|gamma|delta)\s", out, re.M)]
    total = float(re.search(r"^# total ([\d.]+) us", out, re.M)[1])
    rendezvous = float(re.search(r"rendezvous ([\d.]+) us", out)[1])
    return events, total, rendezvous


def test_explain_ring_at_8_ranks_adds_up_by_hand(tmp_path, capsys):
    # 8 KiB of float32 in 8 blocks of 1 KiB: 14 steps of one message each (alpha 1 us,
    # 1024 B at 1 GB/s), 7 of them folding 1 KiB at 0.5 ns/B; delta 0, no rendezvous.
    out = run(capsys, "model", "-a", "ring", "-N", 8, "--bytes", "8K", "--explain",
              "--machine", machine(tmp_path))
    events, total, rendezvous = explained(out)
    terms = [term for term, _ in events]
    assert terms.count("alpha") == 14 and terms.count("beta") == 14
    assert terms.count("gamma") == 7 and rendezvous == 0
    assert all(plus == 1.0 for term, plus in events if term == "alpha")
    assert all(plus == 1.024 for term, plus in events if term == "beta")
    assert all(plus == 0.512 for term, plus in events if term == "gamma")
    assert total == pytest.approx(14 * (1 + 1.024) + 7 * 0.512) == pytest.approx(31.92)
    assert sum(plus for _, plus in events) == pytest.approx(total, abs=1e-3)
    assert "# totals: alpha 14.000 us = 14 x 1" in out


def test_explain_double_binary_tree_at_8_ranks_adds_up(tmp_path, capsys):
    # a pipelined, irregular path (two trees, 4 segments per half): the events still add up,
    # and each term's total is its count times its parameter
    m = machine(tmp_path, delta=2e-7, eager=4096, rendezvous=3e-6)
    out = run(capsys, "model", "-a", "double_binary_tree", "-N", 8, "--bytes", "1M",
              "--explain", "--machine", m)
    events, total, rendezvous = explained(out)
    assert sum(plus for _, plus in events) + rendezvous == pytest.approx(total, abs=1e-2)
    p = cost.predict(pyar.schedule("double_binary_tree", 8, 1 << 18), tuner.load(m))
    assert total == pytest.approx(p.time * 1e6, abs=1e-3)
    alphas = [plus for term, plus in events if term == "alpha"]
    assert len(alphas) == p.terms.messages and set(alphas) == {1.0}
    assert sum(1 for term, _ in events if term == "delta") == p.terms.steps
    assert rendezvous == pytest.approx(p.terms.messages * 3)     # 128 KiB segments > 4 KiB
    assert re.search(r"waits for rank \d+'s (send|receive) port", out), "no port wait shown"


def test_the_memory_terms_show_in_the_table_and_add_up_in_explain(tmp_path, capsys):
    # 16 MiB on 2 ranks, above a 1 MiB resident limit: a byte sent costs 2 ns there instead of
    # 1, a byte folded 1 ns instead of 0.5, a step 3 us (the rows' own at 4 and 64 MiB; 16 MiB
    # between)
    m = machine(tmp_path, resident=1 << 20, memory=[[4 << 20, 2e-9, 1e-9, 3e-6],
                                                    [64 << 20, 2e-9, 1e-9, 3e-6]])
    out = run(capsys, "model", "-a", "ring", "-N", 2, "--bytes", "16M", "--machine", m)
    assert "# memory terms (one node, buffers above 1048576 B; by buffer size, ns per byte " \
           "sent/ns per byte folded/us per step): 4MB 2/1/3, 64MB 2/1/3" in out
    header = next(line for line in out.splitlines() if line.startswith("# algorithm"))
    row = next(line for line in out.splitlines() if line.startswith("  ring")).split()
    columns = header.split()[2:]
    memory = float(row[1 + columns.index("memory")])
    assert memory == pytest.approx((16 << 20) * 1e-3 + (8 << 20) * 0.5e-3, abs=0.01)
    assert float(row[1 + columns.index("delta")]) == pytest.approx(2 * 3.0)
    out = run(capsys, "model", "-a", "ring", "-N", 2, "--bytes", "16M", "--machine", m,
              "--explain")
    events, total, rendezvous = explained(out)
    assert sum(plus for _, plus in events) == pytest.approx(total, abs=1e-2)
    assert re.search(r"#\s+memory ([\d.]+) us", out)[1] == f"{memory:.3f}"
    assert "= alpha + beta + gamma + delta + rendezvous + memory" in out
    out = run(capsys, "model", "-a", "ring", "-N", 2, "--bytes", "16M", "--machine", m,
              "--bw", "1")
    assert "# memory terms none" in out


def test_the_readme_two_rank_example(tmp_path):
    # docs/guides/research.md, "The port rule": ring of 1 KiB on 2 ranks, naive beside it
    params = tuner.load(machine(tmp_path))
    ring = cost.predict(pyar.schedule("ring", 2, 256), params)
    naive = cost.predict(pyar.schedule("naive", 2, 256), params)
    assert ring.time * 1e6 == pytest.approx(2 * (1 + 0.512) + 0.256)
    assert naive.time * 1e6 == pytest.approx(2 * (1 + 1.024) + 0.512)
    naive3 = cost.predict(pyar.schedule("naive", 3, 256), params)   # root's port serialises
    assert naive3.time * 1e6 == pytest.approx(4 * (1 + 1.024) + 2 * 0.512)


def test_two_link_classes_cost_each_message_on_its_link(tmp_path):
    # 2 ranks on 2 nodes: both messages cross (alpha 10 us, 0.1 GB/s)
    params = tuner.load(machine(tmp_path, inter_node={"alpha": 1e-5, "beta": 1e-8}))
    assert params.links and params.inter() == (1e-5, 1e-8)
    apart = pyar.schedule("ring", 2, 256, topology=Topology([0, 1]))
    together = pyar.schedule("ring", 2, 256, topology=Topology([0, 0]))
    assert cost.predict(apart, params).time * 1e6 == pytest.approx(2 * (10 + 5.12) + 0.256)
    assert cost.predict(together, params).time * 1e6 == pytest.approx(2 * (1 + 0.512) + 0.256)
    p, where = cost.estimate("allreduce", "ring", 2, 256, "float32", params,
                             topology=Topology([0, 1]))
    assert where == "schedule" and p.alpha == pytest.approx(2e-5)


def test_machine_files_load_and_round_trip(tmp_path):
    for name in ("this_vm", "gpu_cluster"):
        params, info = tuner.machine(ROOT / "machines" / f"{name}.json")
        assert info["nodes"] >= 1 and info["ranks_per_node"] >= 1 and info["source"]
    params, info = tuner.machine(ROOT / "machines" / "gpu_cluster.json")
    assert params.links and 1e-9 / params.inter()[1] == pytest.approx(50)
    tuner.save(tmp_path / "t.json", params, {"note": "test"})
    assert tuner.load(tmp_path / "t.json") == params
    bad = machine(tmp_path, inter_node={"alpha": 1e-6, "latency": 3})
    with pytest.raises(ValueError, match="inter_node"):
        tuner.load(bad)
    with pytest.raises(ValueError, match="nodes and ranks_per_node"):
        tuner.load(machine(tmp_path, nodes=0))


def test_a_machine_description_drives_auto(tmp_path, monkeypatch):
    # between nodes 1000 times slower: on 2 nodes of 4, hierarchical wins at 1 MiB
    slow = machine(tmp_path, inter_node={"alpha": 1e-3, "beta": 1e-6})
    monkeypatch.setenv("PYAR_TUNING_FILE", slow)
    monkeypatch.delenv("PYAR_ALGO", raising=False)
    two_nodes = Topology.regular(8, 4)
    assert tuner.select("allreduce", "auto", 8, 1 << 18, 1 << 20, "float32",
                        two_nodes) == "hierarchical"
    monkeypatch.setenv("PYAR_TUNING_FILE", machine(tmp_path.parent))
    assert tuner.select("allreduce", "auto", 8, 1 << 18, 1 << 20, "float32",
                        two_nodes) != "hierarchical"


def test_flags_change_the_machine(tmp_path, capsys):
    out = run(capsys, "model", "-a", "ring", "--nodes", 2, "--ranks-per-node", 2,
              "--machine", machine(tmp_path), "--bw", 300, "--bw-inter", 25,
              "--alpha-inter", 5, "--bytes", "1M")
    assert "on 4 ranks (2 nodes of 2)" in out and "with --bw, --alpha-inter, --bw-inter" in out
    assert "300 GB/s); between nodes alpha 5 us, 25 GB/s" in out
    for bad in ("0", "-1"):
        with pytest.raises(SystemExit) as exit_:
            cli.main(["model", "--bw", bad])
        assert exit_.value.code == 2
        assert "--bw must be a number > 0" in capsys.readouterr().err


def test_sweep_marks_the_fastest_and_the_crossovers(tmp_path, capsys):
    png = tmp_path / "sweep.png"
    out = run(capsys, "model", "--sweep", "-N", "8,64", "-a", "recursive_doubling,ring",
              "-b", "1K", "-e", "16M", "--machine", machine(tmp_path), "--plot", png)
    assert png.stat().st_size > 10_000
    blocks = out.split("# 64 ranks")
    for block, n in zip(blocks, (8, 64)):
        rows = [line.split() for line in block.splitlines() if re.match(r"\s+\d+[KM]?\s", line)]
        best = [row[-1] for row in rows]
        assert best[0] == "recursive_doubling" and best[-1] == "ring", block
        assert f"# crossover at {n} ranks: recursive_doubling -> ring between" in block
        for row in rows:             # the * is on the smaller time
            times = [float(c.rstrip("*")) for c in row[1:3]]
            assert row[1 + times.index(min(times))].endswith("*")


def test_load_a_user_algorithm_in_sim_model_and_auto(tmp_path, capsys):
    algo = tmp_path / "my_algo.py"
    algo.write_text(TWO_SHOT)
    out = run(capsys, "sim", "--load", algo, "-a", "two_shot,ring", "-N", 7, "--count", 100)
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if not line.startswith("#")}
    assert rows["two_shot"][-1] == "yes" and rows["two_shot"][1] == "7"
    bare = run(capsys, "sim", "--load", algo, "-a", "two_shot", "-N", 33, "--count", 99,
               "--no-data")
    assert "two_shot" in bare and "(not checked)" in bare
    model = run(capsys, "model", "--load", algo, "-N", 8, "--bytes", "64K")
    assert re.search(r"^\s+two_shot\s+[\d.]+.*schedule$", model, re.M)   # auto=True: a candidate
    assert "two_shot" in tuner.candidates("allreduce")
    # without auto=True it is not a candidate; and auto picks a user's algorithm where it wins
    # (here a copy of ring with ring's closed form, which ties with ring and sorts first)
    mine = tmp_path / "mine.py"
    mine.write_text("import pyar\nfrom pyar.algorithms import algorithm\n"
                    "from pyar.algorithms.ring import ring\n"
                    "pyar.register_algorithm('a_ring', auto=True, cost=algorithm('ring').cost)(\n"
                    "    lambda rank, size, count, topology=None: ring(rank, size, count))\n"
                    "pyar.register_algorithm('b_ring')(\n"
                    "    lambda rank, size, count, topology=None: ring(rank, size, count))\n")
    loader.load_all([str(mine)])
    assert "a_ring" in tuner.candidates("allreduce")
    assert "b_ring" not in tuner.candidates("allreduce")
    assert tuner.choose("allreduce", 5, 5 << 16, "float32", tuner.DEFAULTS) == "a_ring"
    # costed from its schedule (exact=True), it takes what ring's closed form says
    p, where = cost.estimate("allreduce", "b_ring", 5, 5 << 16, "float32", tuner.DEFAULTS)
    assert where == "schedule"
    assert p.time == pytest.approx(cost.estimate("allreduce", "ring", 5, 5 << 16, "float32",
                                                 tuner.DEFAULTS)[0].time, rel=1e-12)


def test_load_errors_are_clear(capsys):
    assert_exit = pytest.raises(SystemExit)
    with assert_exit:
        cli.main(["sim", "--load", "no/such/file.py"])
    assert "no such file" in capsys.readouterr().err


def test_bench_loads_a_user_algorithm_under_mpiexec(tmp_path):
    algo = tmp_path / "my_algo.py"
    algo.write_text(TWO_SHOT)
    mpiexec = Path(sys.executable).with_name("mpiexec")
    proc = subprocess.run(
        ["timeout", "-k", "5", "120", str(mpiexec), "-n", "2", sys.executable, "-m", "pyar",
         "bench", "--load", str(algo), "-a", "two_shot", "-b", "8", "-e", "4K", "-f", "8",
         "-n", "3", "-w", "1"],
        capture_output=True, text=True, timeout=150, cwd=tmp_path,
        env={**os.environ, "PYAR_TUNING_FILE": str(tmp_path / "none.json")})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines()
            if not line.startswith("#") and "two_shot" in line]
    assert [row[0] for row in rows] == ["8", "64", "512", "4096"], proc.stdout
    assert all(row[8] == row[12] == "0" for row in rows), proc.stdout    # #wrong, both
    assert "# Wrong elements       : 0 OK" in proc.stdout
