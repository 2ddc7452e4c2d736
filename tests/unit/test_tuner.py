"""The auto tuner, the tuning file, ``pyar model`` and ``pyar tune``."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from launch import ROOT, explain, run

import pyar
from pyar.cli import tune as calibrate
from pyar.model import cost, tuner
from pyar.runtime import library
from pyar.collectives import names
from pyar.core.schedule import Chunk, Recv, Send, Step
from pyar.core.topology import Topology

CLASSIC = ["binomial", "naive", "rabenseifner", "recursive_doubling", "ring"]


def write_tuning(path, alpha, beta, gamma, delta=0.0, **eager):
    path.write_text(json.dumps({"format": tuner.FORMAT, "alpha": alpha, "beta": beta,
                                "delta": delta, "gamma": gamma, **eager}))
    return path


@pytest.fixture
def tuning(tmp_path, monkeypatch):
    """Point PYAR_TUNING_FILE at a fresh file written by the returned function."""
    monkeypatch.delenv("PYAR_ALGO", raising=False)

    def use(name, *args, **kwargs):
        path = write_tuning(tmp_path / f"{name}.json", *args, **kwargs)
        monkeypatch.setenv("PYAR_TUNING_FILE", str(path))
        return tuner.load(path)
    return use


def schedule_times(size, count, dtype, params):
    """Each candidate's predicted time, costed from the schedules themselves."""
    return {n: p.time for n, (p, _) in tuner.predictions("allreduce", size, count, dtype, params,
                                                         exact=True).items()}


def assert_least(chosen, times):
    assert times[chosen] <= min(times.values()) * (1 + 1e-9), (chosen, times)


@pytest.mark.parametrize("size,count", [(2, 2), (4, 8), (5, 1 << 12), (8, 1 << 16),
                                        (8, 1 << 20), (13, 1 << 14), (16, 40)])
@pytest.mark.parametrize("machine", ["latency bound", "bandwidth bound", "slow reduction"])
def test_auto_picks_the_least_predicted_time(tuning, size, count, machine):
    params = tuning(machine.replace(" ", "_"), **{
        "latency bound": dict(alpha=1e-4, beta=1e-11, gamma={"float32": 1e-11}),
        "bandwidth bound": dict(alpha=1e-7, beta=1e-9, gamma={"float32": 1e-10}, delta=1e-7),
        "slow reduction": dict(alpha=1e-6, beta=1e-11, gamma={"float32": 1e-8}),
    }[machine])
    times = schedule_times(size, count, "float32", params)
    chosen = tuner.select("allreduce", "auto", size, count, 4 * count, "float32")
    assert_least(chosen, times)
    assert tuner.select("allreduce", "auto", size, count, 4 * count) == chosen   # float32 by size


def test_the_tuning_file_changes_the_choice(tuning):
    args = ("allreduce", "auto", 8, 1 << 16, 1 << 18)
    tuning("slow_link", alpha=1e-3, beta=1e-12, gamma={"float32": 1e-12})
    assert tuner.select(*args) == "recursive_doubling"
    tuning("fast_link", alpha=1e-7, beta=1e-9, gamma={"float32": 1e-10})
    assert tuner.select(*args) == "rabenseifner"


def test_the_dtype_changes_the_choice(tuning):
    tuning("dtypes", alpha=1e-5, beta=1e-11, gamma={"float64": 1e-11, "int64": 1e-7})
    args = ("allreduce", "auto", 8, 1 << 12, 8 << 12)
    assert tuner.select(*args, "float64") == "recursive_doubling"     # fewest messages
    assert tuner.select(*args, "int64") == "rabenseifner"             # least folded


def test_explicit_argument_beats_pyar_algo_which_beats_auto(tuning, monkeypatch):
    tuning("any", alpha=1e-5, beta=1e-11, gamma={"float32": 1e-11})
    args = (8, 1 << 10, 4 << 10)
    assert tuner.select("allreduce", "auto", *args) == "recursive_doubling"
    monkeypatch.setenv("PYAR_ALGO", "ring")
    assert tuner.select("allreduce", "auto", *args) == "ring"
    assert tuner.select("allreduce", "naive", *args) == "naive"
    monkeypatch.setenv("PYAR_ALGO", "allgather:bruck;allreduce:binomial")
    assert tuner.select("allreduce", "auto", *args) == "binomial"
    monkeypatch.setenv("PYAR_ALGO", "allreduce:auto")
    assert tuner.select("allreduce", "auto", *args) == "recursive_doubling"


def test_without_a_tuning_file_the_shipped_defaults_apply(tmp_path, monkeypatch):
    monkeypatch.setenv("PYAR_TUNING_FILE", str(tmp_path / "absent.json"))
    assert tuner.parameters() is tuner.defaults()
    assert tuner.source().startswith("shipped defaults")
    assert_least(tuner.select("allreduce", "auto", 4, 1 << 20, 4 << 20),
                 schedule_times(4, 1 << 20, "float32", tuner.defaults()))
    assert all(v > 0 for v in (tuner.DEFAULTS.alpha, tuner.DEFAULTS.beta,
                               tuner.DEFAULTS.gamma_of("float32")))


def test_the_default_path_follows_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv("PYAR_TUNING_FILE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tuner.tuning_path() == tmp_path / "pyar" / f"tuning-{library.current().slug}.json"
    monkeypatch.setenv("PYAR_TUNING_FILE", str(tmp_path / "mine.json"))
    assert tuner.tuning_path() == tmp_path / "mine.json"


@pytest.mark.parametrize("text", ["not json", "[]", '{"format": "pyar-tuning/1"}',
                                  '{"format": "other", "alpha": 1, "beta": 1, "delta": 0, '
                                  '"gamma": {"float32": 1}}',
                                  '{"format": "pyar-tuning/1", "alpha": -1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {}}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}, "eager": 0}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}, "eager": "8K"}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}, "rendezvous": -1}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}, "resident": -1}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}, "memory": [[1, 2, 3]]}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, "delta": '
                                  '0, "gamma": {"float32": 1}, "memory": [[8, 1, 1, 0], [8, 1, 1, 0]]}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}, "memory": [[8, -1, 1, 0]]}',
                                  '{"format": "pyar-tuning/1", "alpha": 1, "beta": 1, '
                                  '"delta": 0, "gamma": {"float32": 1}, "memory": [[0, 1, 1, 0]]}'])
def test_a_malformed_tuning_file_says_what_was_expected(tmp_path, text):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=f"tuning file {path}: .*(expected|JSON)"):
        tuner.load(path)


def test_save_then_load_round_trips(tmp_path):
    params = cost.Params(1e-6, 2e-10, {"float32": 3e-11, "int8": 4e-11}, 5e-7)
    tuner.save(tmp_path / "sub" / "t.json", params, {"ranks": 2})
    assert tuner.load(tmp_path / "sub" / "t.json") == params
    assert json.loads((tmp_path / "sub" / "t.json").read_text())["eager"] is None  # no limit
    measured = params._replace(memory=((1048576.0, 2e-10, 1e-10, 1e-6),
                                       (67108864.0, 3e-10, 5e-11, 2e-6)))
    tuner.save(tmp_path / "m.json", measured, {})
    assert tuner.load(tmp_path / "m.json") == measured
    limited = params._replace(eager=8000.0, rendezvous=2e-6, resident=65536.0)
    tuner.save(tmp_path / "t.json", limited, {"ranks": 2})
    assert tuner.load(tmp_path / "t.json") == limited


def test_a_tuning_file_without_an_eager_limit_has_none(tmp_path):
    """Nor small plans without delta: a file of before those keys means what it meant."""
    path = tmp_path / "old.json"
    path.write_text('{"format": "pyar-tuning/1", "alpha": 1e-6, "beta": 1e-9, "delta": 0, '
                    '"gamma": {"float32": 1e-10}}')
    params = tuner.load(path)
    assert params.eager == math.inf and params.rendezvous == 0 and params.resident == 0


def staircase(limit, extra, shift=0.0):
    """Exchange times of a library with an eager limit: alpha + size*beta, plus ``extra`` past
    ``limit`` bytes, plus ``shift`` everywhere (as an alpha measured too low would show)."""
    return lambda n: 3e-6 + n * 1e-10 + shift + (extra if n > limit else 0.0)


@pytest.mark.parametrize("limit", [3000, 8064, 65000])
@pytest.mark.parametrize("shift", [0.0, 1.2e-6, -0.5e-6])
def test_find_eager_finds_the_limit_to_64_bytes_and_the_rendezvous(limit, shift):
    eager, rendezvous = calibrate.find_eager(staircase(limit, 3e-6, shift), 3e-6, 1e-10)
    assert limit - 64 <= eager <= limit and rendezvous == pytest.approx(3e-6)


def test_find_eager_needs_a_step_that_lasts():
    assert calibrate.find_eager(staircase(10 ** 9, 3e-6), 3e-6, 1e-10) == (math.inf, 0.0)
    spike = staircase(10 ** 9, 0.0)
    one_size_slow = lambda n: spike(n) + (5e-6 if n == calibrate.EAGER_SIZES[5] else 0.0)
    assert calibrate.find_eager(one_size_slow, 3e-6, 1e-10) == (math.inf, 0.0)
    small = staircase(8064, 1e-6)            # a step of less than alpha/2: not a rendezvous
    assert calibrate.find_eager(small, 3e-6, 1e-10) == (math.inf, 0.0)


def test_the_rendezvous_changes_the_choice(tuning):
    """2 ranks, 128 KiB: above the eager limit one exchange of everything (recursive doubling)
    beats the double binary tree's two messages of half, each paying a rendezvous."""
    machine = dict(alpha=3e-6, beta=1e-10, gamma={"float32": 1e-10}, delta=1e-6)
    tuning("no limit", **machine)
    assert pyar.model.tuner.select("allreduce", "auto", 2, 32768, 131072, np.float32) != \
        "recursive_doubling"
    tuning("limit", **machine, eager=8000, rendezvous=4e-6)
    assert pyar.model.tuner.select("allreduce", "auto", 2, 32768, 131072, np.float32) == \
        "recursive_doubling"


def swap(rank, size, count, topology=None):
    """A user's allreduce for two ranks, the same exchange as recursive doubling."""
    everything = Chunk("data", 0, count)
    return [Step([Send(1 - rank, everything), Recv(1 - rank, everything, reduce=True)])]


def needs_topology(rank, size, count, topology=None):
    if topology is None:
        raise ValueError("needs_topology needs a topology")
    return []


def test_user_algorithms_join_auto_only_when_registered_with_auto(tuning, scratch_registry):
    tuning("any", alpha=1e-5, beta=1e-11, gamma={"float32": 1e-11})
    pyar.register_algorithm("aaa_swap")(swap)
    pyar.register_algorithm("needs_topology")(needs_topology)
    assert set(CLASSIC) <= set(tuner.candidates("allreduce"))
    assert not {"aaa_swap", "needs_topology", "mpi"} & set(tuner.candidates("allreduce"))
    assert tuner.select("allreduce", "auto", 2, 16, 64) == "recursive_doubling"
    pyar.register_algorithm("aaa_swap", auto=True)(swap)
    pyar.register_algorithm("needs_topology", auto=True)(needs_topology)
    assert {"aaa_swap", "needs_topology"} <= set(tuner.candidates("allreduce"))
    # costed from its schedule, it ties with recursive doubling and wins the tie by name (the
    # registration outdates the memoised choice); needs_topology is left out
    times = tuner.predictions("allreduce", 2, 16, "float32", tuner.parameters())
    assert times["aaa_swap"][1] == "schedule" and "needs_topology" not in times
    assert tuner.select("allreduce", "auto", 2, 16, 64) == "aaa_swap"
    # a topology-aware one competes only on several nodes
    pyar.register_algorithm("aaa_nodes", auto=True, topology_aware=True)(swap)
    one, two = Topology.regular(2, 2), Topology.regular(2, 1)
    assert "aaa_nodes" not in tuner.candidates("allreduce", one)
    assert "aaa_nodes" in tuner.predictions("allreduce", 2, 16, "float32", tuner.parameters(),
                                            topology=two)
    # a built-in name registered again, without auto, leaves auto
    pyar.register_algorithm("recursive_doubling")(swap)
    assert "recursive_doubling" not in tuner.candidates("allreduce")


def guide_example():
    """Run the first code block of the research guide's "Adding an algorithm"."""
    guide = ROOT / "docs" / "guides" / "research.md"
    section = guide.read_text().split("\n## Adding an algorithm\n")[1]
    code = section.split("\n## ")[0].split("```python\n")[1].split("```")[0]
    exec(compile(code, str(guide), "exec"), {})


def test_the_guides_algorithm_is_seen_everywhere(tuning, scratch_registry):
    params = tuning("any", alpha=1e-5, beta=1e-11, gamma={"float32": 1e-11})
    guide_example()
    n, count = 8, 64
    s = pyar.schedule("doubling", n, count)
    inputs = [np.arange(count, dtype=np.float32) + 1000 * (r + 1) for r in range(n)]
    assert all(np.array_equal(out, sum(inputs)) for out in pyar.simulate(s, inputs).outputs)
    m = 4 * count
    closed = cost.formula("allreduce", "doubling", n, count, "float32")
    assert closed == (3, 3 * m, 3 * m, 3) == cost.predict(s, params).terms
    assert cost.estimate("allreduce", "doubling", n, count, "float32", params)[1] == "formula"
    assert "doubling" in tuner.candidates("allreduce")
    # it ties with recursive doubling at a power of two and wins the tie by name; at 6 ranks
    # its cost raises ValueError and auto leaves it out
    assert tuner.choose("allreduce", n, count, "float32", params) == "doubling"
    assert tuner.select("allreduce", "auto", n, count, m, "float32") == "doubling"
    assert "doubling" not in tuner.predictions("allreduce", 6, 48, "float32", params)
    assert tuner.select("allreduce", "auto", 6, 48, 192, "float32") == "recursive_doubling"


def model(*args, env=None):
    return subprocess.run([sys.executable, "-m", "pyar", "model", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def test_pyar_model_prints_the_terms(tmp_path):
    path = write_tuning(tmp_path / "t.json", alpha=2e-6, beta=1e-9, gamma={"float32": 1e-10},
                        delta=1e-6)
    env = {**__import__("os").environ, "PYAR_TUNING_FILE": str(path)}
    proc = model("-a", "ring,rabenseifner", "-N", "1024", "--bytes", "1M", env=env)
    assert proc.returncode == 0, proc.stderr
    assert f"# parameters: {path}" in proc.stdout
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if not line.startswith("#")}
    m, n = 1 << 20, 1024
    ring = [2 * (n - 1) * 2, 2 * (n - 1) / n * m * 1e-3, (n - 1) / n * m * 1e-4, 2 * (n - 1)]
    rab = [2 * 10 * 2, 2 * (n - 1) / n * m * 1e-3, (n - 1) / n * m * 1e-4, 2 * 10]
    for name, (a, b, g, d) in (("ring", ring), ("rabenseifner", rab)):
        time_us, alpha, beta, gamma, delta = map(float, rows[name][1:6])
        assert (alpha, beta, gamma, delta) == pytest.approx((a, b, g, d), abs=0.01), name
        assert time_us == pytest.approx(a + b + g + d, abs=0.02), name
        assert rows[name][-1] == "formula"
    assert "auto picks" not in proc.stdout


def test_pyar_model_costs_schedules_and_names_the_auto_choice(tmp_path):
    path = write_tuning(tmp_path / "t.json", alpha=1e-5, beta=1e-11, gamma={"int8": 1e-11})
    env = {**__import__("os").environ, "PYAR_TUNING_FILE": str(path)}
    proc = model("-N", "6", "--bytes", "64", "-d", "int8", "--schedule", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if not line.startswith("#")]
    assert [row[0] for row in rows] == tuner.candidates("allreduce")
    assert all(row[-1] == "schedule" for row in rows)
    assert "# auto picks: recursive_doubling" in proc.stdout


@pytest.mark.parametrize("args,message", [
    (["-a", "nope"], "unknown allreduce algorithm 'nope'"),
    (["--bytes", "6", "-d", "float32"], "multiple of the float32 item size"),
    (["-d", "complex64"], "dtype"),
    (["--collective", "scatter"], "collective must be one of"),
])
def test_pyar_model_rejects_bad_input(args, message):
    proc = model(*args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_pyar_tune_writes_a_well_formed_file(tmp_path):
    path = tmp_path / "tuning.json"
    proc = run(2, "-m", "pyar", "tune", "--quick", timeout=200,
               env={"PYAR_TUNING_FILE": str(path)})
    assert proc.returncode == 0, explain(proc)
    assert f"# wrote {path}" in proc.stdout
    params = tuner.load(path)
    assert params.alpha > 0 and params.beta > 0 and params.delta >= 0
    assert params.eager > 0 and params.rendezvous >= 0
    assert params.resident == pyar.runtime.plan.RESIDENT_BYTES
    assert set(params.gamma) == {d.name for d in pyar.core.ops.DTYPES}
    assert all(g > 0 for g in params.gamma.values())
    assert [row[0] for row in params.memory] == [1 << 20, 4 << 20, 16 << 20, 64 << 20]
    assert all(beta > 0 and gamma >= 0 and delta >= 0 for _, beta, gamma, delta in params.memory)
    assert "memory terms (one node, buffers above 524288 B" in proc.stdout
    measured = json.loads(path.read_text())["measured"]
    assert measured["ranks"] == 2 and measured["quick"] is True and measured["same_host"]


def test_pyar_tune_needs_two_ranks(tmp_path):
    proc = run(1, "-m", "pyar", "tune", "--quick", "-o", str(tmp_path / "t.json"), timeout=100)
    assert proc.returncode == 2 and "mpiexec -n 2" in proc.stderr, explain(proc)
    assert not (tmp_path / "t.json").exists()


MACHINES = {"latency bound": dict(alpha=1e-4, beta=1e-11, gamma={"float32": 1e-11}),
            "bandwidth bound": dict(alpha=1e-7, beta=1e-9, gamma={"float32": 1e-10}, delta=1e-7)}


@pytest.mark.parametrize("collective", ["reduce_scatter", "allgather", "reduce", "bcast",
                                        "alltoall", "barrier"])
@pytest.mark.parametrize("size", [3, 8, 12])
@pytest.mark.parametrize("machine", list(MACHINES))
def test_auto_picks_the_least_predicted_time_for_every_collective(tuning, collective, size,
                                                                  machine):
    params = tuning(machine.replace(" ", "_"), **MACHINES[machine])
    for count in ([0] if collective == "barrier" else [size, size * 1024, size * 65536]):
        times = {n: p.time for n, (p, _) in tuner.predictions(collective, size, count,
                                                              "float32", params,
                                                              exact=True).items()}
        assert_least(tuner.select(collective, "auto", size, count, 4 * count, "float32"), times)


def test_hierarchical_competes_only_on_several_nodes(tuning):
    tuning("fast_link", alpha=1e-6, beta=1e-9, gamma={"float32": 1e-10})
    one_node, three_nodes = Topology([0] * 12), Topology.regular(12, 4)
    assert "hierarchical" not in tuner.candidates("allreduce")
    assert "hierarchical" not in tuner.candidates("allreduce", one_node)
    assert "hierarchical" in tuner.candidates("allreduce", three_nodes)
    count = 1 << 20
    # on one node it would tie with ring (and win the tie by name)
    for topology in (None, one_node):
        chosen = tuner.select("allreduce", "auto", 12, count, 4 * count, "float32", topology)
        assert chosen != "hierarchical"
    # three nodes of four: ring's bytes in 10 steps, not 22 (and no fold, unlike rabenseifner)
    times = {n: p.time for n, (p, _) in tuner.predictions(
        "allreduce", 12, count, "float32", tuner.parameters(), exact=True,
        topology=three_nodes).items()}
    chosen = tuner.select("allreduce", "auto", 12, count, 4 * count, "float32", three_nodes)
    assert chosen == "hierarchical"
    assert_least(chosen, times)
    # and not where it is not the cheapest: short messages on the same nodes
    assert tuner.select("allreduce", "auto", 12, 12, 48, "float32", three_nodes) != \
        "hierarchical"


def test_a_memo_miss_never_builds_a_schedule_for_a_builtin(tuning, monkeypatch):
    tuning("any", alpha=1e-6, beta=1e-9, gamma={"float32": 1e-10})

    def forbidden(*args, **kwargs):
        raise AssertionError("auto built or costed a schedule")
    monkeypatch.setattr(cost, "predict", forbidden)
    monkeypatch.setattr(cost, "build", forbidden)
    for topology in (None, Topology.regular(1024, 8)):
        for collective in names():
            count = 0 if collective == "barrier" else 1024 * 4096
            assert tuner.select(collective, "auto", 1024, count, 4 * count, "float32",
                                topology) in tuner.candidates(collective, topology)


def test_pyar_model_costs_other_collectives_and_topologies(tmp_path):
    path = write_tuning(tmp_path / "t.json", alpha=1e-6, beta=1e-9, gamma={"float32": 1e-10})
    env = {**__import__("os").environ, "PYAR_TUNING_FILE": str(path)}
    proc = model("--collective", "reduce_scatter", "-N", "16", "--bytes", "64K", env=env)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()
            if not line.startswith("#")}
    assert list(rows) == ["pairwise", "pat", "recursive_halving", "ring"]
    assert all(row[-1] == "formula" for row in rows.values())
    n, m = 16, 64 << 10
    assert float(rows["ring"][3]) == pytest.approx((n - 1) / n * m * 1e-3, abs=0.01)   # beta us
    assert "# auto picks:" in proc.stdout
    proc = model("-N", "12", "--ranks-per-node", "4", "--bytes", "4M", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "# auto picks: hierarchical" in proc.stdout and "3 nodes of 4" in proc.stdout
    assert "hierarchical" not in model("-N", "12", "--bytes", "4M", env=env).stdout
