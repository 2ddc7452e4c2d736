"""`pyar bench`: the nccl-tests style table, its JSON and plot, its checks, and its errors."""

import json
import sys

import numpy as np
import pytest

from launch import explain, run

import pyar
import pyar.collectives
from pyar.cli import bench
from pyar.cli.bench import format_size, parse_algorithms, parse_size, sizes

VARIANTS = ("out_of_place", "in_place")


def table_rows(stdout):
    return [line.split() for line in stdout.splitlines() if line and not line.startswith("#")]


def check_measure(measure, size, factor):
    assert measure["time_us"] > 0
    assert measure["algbw"] == pytest.approx(size / measure["time_us"] / 1e3)
    assert measure["busbw"] == pytest.approx(measure["algbw"] * factor)


@pytest.mark.parametrize("nprocs", [2, 3])
def test_bench_table_json_and_plot(nprocs, tmp_path):
    out = tmp_path / "bench.json"
    picture = tmp_path / "bench.png"
    proc = run(nprocs, "-m", "pyar", "bench", "-b", "8", "-e", "64K", "-f", "64", "-n", "3",
               "-w", "1", "--json", str(out), "--plot", str(picture), timeout=300)
    assert proc.returncode == 0, explain(proc)
    report = json.loads(out.read_text())
    config, rows = report["config"], report["rows"]
    names = ["mpi", *[n for n in pyar.algorithms() if n != "mpi"], "auto"]
    assert config["ranks"] == nprocs and config["collective"] == "allreduce"
    assert config["algorithms"] == names and config["check"] == 1
    assert [(r["size"], r["algorithm"]) for r in rows] == \
        [(s, n) for s in (8, 512, 32768) for n in names]
    for row in rows:
        assert row["count"] == row["size"] // 4 and row["type"] == "float32"
        assert row["redop"] == "sum" and row["iters"] == 3 and row["warmup"] == 1
        for variant in VARIANTS:
            check_measure(row[variant], row["size"], 2 * (nprocs - 1) / nprocs)
            assert row[variant]["wrong"] == 0, row
        assert set(row["vs_mpi"]) == set(VARIANTS)
        assert (row["vs_best"] is None) == (row["algorithm"] == "mpi")
        assert (row["chosen"] is not None) == (row["algorithm"] == "auto")
    mpi = [r for r in rows if r["algorithm"] == "mpi"]
    assert all(r["vs_mpi"] == {v: 1.0 for v in VARIANTS} for r in mpi)
    summary = report["summary"]
    assert summary["wrong"] == 0 and set(summary["avg_busbw_by_algorithm"]) == set(names)
    assert [r["size"] for r in summary["auto_regret"]] == [8, 512, 32768]
    # the printed table is the JSON's, row for row
    printed = table_rows(proc.stdout)
    assert [(int(p[0]), p[4].split(":")[0]) for p in printed] == \
        [(r["size"], r["algorithm"]) for r in rows]
    assert all(p[8] == p[12] == "0" for p in printed), proc.stdout
    for needle in (f"{nprocs} ranks", "MPI library: ", "# Avg bus bandwidth", "auto regret",
                   "# Wrong elements       : 0 OK", f"# plot: {picture}"):
        assert needle in proc.stdout, proc.stdout
    assert picture.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_bench_counts_a_wrong_algorithm(tmp_path):
    out = tmp_path / "broken.json"
    proc = run(3, "tests/helpers/bench_driver.py", "broken", "--", "-b", "64", "-e", "4K", "-f", "64",
               "-n", "2", "-w", "1", "-a", "copy_left,ring", "--json", str(out), timeout=200)
    assert proc.returncode == 1, explain(proc)          # wrong rows fail the run
    rows = {(r["size"], r["algorithm"]): r for r in json.loads(out.read_text())["rows"]}
    for size in (64, 4096):
        for variant in VARIANTS:
            # every element of every rank: copy_left passes on one input instead of the sum
            assert rows[size, "copy_left"][variant]["wrong"] == 3 * size // 4
            assert rows[size, "ring"][variant]["wrong"] == 0
            assert rows[size, "mpi"][variant]["wrong"] == 0
    assert "FAILED" in proc.stdout


def test_bench_drives_every_collective(tmp_path):
    """Each collective's record: nccl-tests sizes and bus factors, variants, and every row
    correct."""
    proc = run(3, "tests/helpers/bench_driver.py", "others", str(tmp_path), "--", "-b", "24",
               "-e", "1536", "-f", "64", "-n", "2", "-w", "1", "-a", "auto", timeout=300)
    assert proc.returncode == 0, explain(proc)
    expect = {  # collective: (size for -b 24 and -e 1536 at 3 ranks, count, factor, variants)
        "reduce_scatter": ([24, 1536], [2, 128], 2 / 3, ["out_of_place"]),
        "allgather": ([24, 1536], [2, 128], 2 / 3, ["out_of_place"]),
        "reduce": ([24, 1536], [6, 384], 1, VARIANTS),
        "bcast": ([24, 1536], [6, 384], 1, ["in_place"]),
        "alltoall": ([24, 1536], [2, 128], 2 / 3, VARIANTS),
    }
    for name, (sizes_, counts, factor, variants) in expect.items():
        report = json.loads((tmp_path / f"{name}.json").read_text())
        assert report["config"]["collective"] == name
        rows = report["rows"]
        assert [r["algorithm"] for r in rows] == ["mpi", "auto"] * 2
        assert [r["size"] for r in rows[::2]] == sizes_ and [r["count"] for r in rows[::2]] == counts
        for row in rows:
            for variant in VARIANTS:
                if variant in variants:
                    check_measure(row[variant], row["size"], factor)
                    assert row[variant]["wrong"] == 0, (name, row)
                else:
                    assert row[variant] is None
        assert report["summary"]["wrong"] == 0


@pytest.mark.parametrize("collective, algorithm", [("allreduce", "ring"), ("reduce", "binomial"),
                                                   ("bcast", "binomial")])
def test_bench_persistent_rows_and_the_faster_library_call(collective, algorithm, tmp_path):
    """--persistent adds the MPI library's persistent collective (mpi_init) and pyar's
    (NAME_init) rows, all checked; every ratio is against the faster of the library's
    blocking and persistent call."""
    out = tmp_path / "bench.json"
    proc = run(2, "-m", "pyar", "bench", "--collective", collective, "-b", "8", "-e", "2M",
               "-f", "512", "-n", "3", "-w", "1", "-a", f"{algorithm},auto", "--persistent",
               "--json", str(out), timeout=300)
    assert proc.returncode == 0, explain(proc)
    report = json.loads(out.read_text())
    names = ["mpi", "mpi_init", algorithm, "auto", f"{algorithm}_init", "auto_init"]
    assert report["config"]["algorithms"] == names
    rows = report["rows"]
    assert [r["algorithm"] for r in rows] == names * 3
    for size in (8, 4096, 1 << 21):
        mine = {r["algorithm"]: r for r in rows if r["size"] == size}
        for variant in mine["mpi"]["vs_mpi"]:
            best = min(mine["mpi"][variant]["time_us"], mine["mpi_init"][variant]["time_us"])
            for row in mine.values():
                assert row[variant]["wrong"] == 0, row
                assert row["vs_mpi"][variant] == pytest.approx(row[variant]["time_us"] / best)
        assert mine["auto_init"]["vs_best"] is None and mine["auto"]["vs_best"] is not None


def test_bench_without_torch_says_so():
    proc = run(2, "tests/helpers/bench_driver.py", "no_torch", "--", "-e", "8", "--peer", "gloo",
               timeout=100)
    assert proc.returncode != 0
    assert "--peer gloo needs torch (pip install torch), which is not importable" in proc.stderr


def test_bench_rejects_bad_arguments_before_timing():
    for args, message in [(["-a", "nope"], "unknown allreduce algorithm 'nope'"),
                          (["--collective", "gather"], "collective must be one of"),
                          (["-c", "2"], "check must be 0 or 1"),
                          (["-o", "avg", "-d", "int32"], "op 'avg' needs a floating dtype")]:
        proc = run(1, "-m", "pyar", "bench", "-e", "8", *args, timeout=100)
        assert proc.returncode == 2 and message in proc.stderr, (args, explain(proc))
        assert not table_rows(proc.stdout), (args, proc.stdout)


def test_the_bench_times_the_registered_collectives_that_move_data(monkeypatch):
    assert bench.collectives() == ["allreduce", "reduce_scatter", "allgather", "reduce",
                                   "bcast", "alltoall"]         # not barrier: no sizes
    assert bench.entry("allreduce") is pyar.collectives.collective("allreduce")
    assert bench.entry("allreduce").library_name == "comm.Allreduce"
    for name in ("barrier", "gather"):
        with pytest.raises(ValueError, match="collective must be one of allreduce, "):
            bench.entry(name)
    monkeypatch.delitem(pyar.collectives._records, "alltoall")
    with pytest.raises(ValueError, match="collective must be one of"):
        bench.entry("alltoall")


def test_the_rows_of_each_collective_are_its_records():
    """Out of place where a result apart from x exists, in place where out can be x."""
    both, oop, ip = ("out_of_place", "in_place"), ("out_of_place",), ("in_place",)
    assert {name: bench.variants(bench.entry(name)) for name in bench.collectives()} == {
        "allreduce": both, "reduce_scatter": oop, "allgather": oop, "reduce": both,
        "bcast": ip, "alltoall": both}


def test_exact_collectives_count_every_differing_element():
    allgather = pyar.collectives.collective("allgather")
    expected = np.arange(12, dtype=np.float32).reshape(3, 4)
    result = expected.copy()
    result[1, 2] += 1
    result[2, 0] = -0.5
    oracle = bench._Oracle(expected, None)
    assert bench._count_wrong(allgather, oracle, result, "sum", 3) == 2
    assert bench._count_wrong(allgather, oracle, expected.copy(), "sum", 3) == 0
    assert bench._count_wrong(allgather, oracle, None, "sum", 3) == 12


def test_reductions_count_only_what_is_beyond_tolerance():
    allreduce = pyar.collectives.collective("allreduce")
    expected = np.full(8, 3000.0, np.float32)
    scale = np.full(8, 3000.0)
    result = expected.copy()
    result[0] = np.nextafter(result[0], np.float32(np.inf))    # one ulp: within 2 * 2 * eps
    result[5] = 3001.0                                          # far off
    oracle = bench._Oracle(expected, scale)
    assert bench._count_wrong(allreduce, oracle, result, "sum", 2) == 1


def test_plot_without_matplotlib_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ValueError, match=r"--plot needs matplotlib \(pip install 'pyar\[plot\]'\)"):
        bench.pyplot()


def test_sizes_parse_like_nccl_tests():
    assert [parse_size(s) for s in ("8", "64K", "4M", "1G", "2KiB")] == \
        [8, 65536, 4 << 20, 1 << 30, 2048]
    assert sizes(8, 128, 4) == [8, 32, 128]
    assert format_size(4 << 20) == "4M" and format_size(1000) == "1000"
    with pytest.raises(ValueError, match="size must look like"):
        parse_size("lots")


def test_algorithm_lists():
    registered = [n for n in pyar.algorithms() if n != "mpi"]
    assert parse_algorithms("all,auto") == [*registered, "mpi", "auto"]
    assert parse_algorithms("ring, auto,ring") == ["ring", "auto"]
    assert bench.default_iters(8) == 1000 and bench.default_iters(64 << 20) == 2
    assert bench._batches(40) == [3] * 8 + [2] * 8 and bench._batches(2) == [1, 1]


def test_batches_take_turns_each_one_implementation_later():
    """Every implementation is timed after each other one in turn (no fixed neighbour)."""
    order = []

    class Clockless:
        def Barrier(self):
            pass

        def Allreduce(self, *args):
            pass

    runs = [lambda i=i: order.append(i) for i in range(3)]
    bench._time_interleaved(Clockless(), runs, iters=3, warmup=0)
    assert order == [0, 1, 2, 1, 2, 0, 2, 0, 1]


def test_a_call_that_writes_nothing_is_wrong_even_after_a_right_one():
    from mpi4py import MPI

    allreduce = pyar.collectives.collective("allreduce")
    pristine = np.arange(1.0, 9.0, dtype=np.float32)
    x, out = pristine.copy(), pristine.copy()           # out already holds the right answer
    oracle = bench._Oracle(pristine.copy(), np.abs(pristine).astype(np.float64))
    right = lambda: np.copyto(out, x) or out            # noqa: E731  (allreduce at 1 rank)
    nothing = lambda: out                               # noqa: E731
    impls = [bench.Implementation(name, None, ()) for name in ("ring", "auto", "ring")]
    assert bench._check(MPI.COMM_SELF, allreduce, oracle, impls, [right, nothing, right], x,
                        out, pristine, pyar.Op.SUM) == [0, 8, 0]
    bare = lambda: np.copyto(out, x)                    # noqa: E731  (the library's: None)
    mpi = [bench.Implementation("mpi", None, ())] * 2
    assert bench._check(MPI.COMM_SELF, allreduce, oracle, mpi, [bare, lambda: None], x, out,
                        pristine, pyar.Op.SUM) == [0, 8]


@pytest.mark.parametrize("name", ["allreduce", "reduce_scatter", "allgather", "reduce", "bcast",
                                  "alltoall", "barrier"])
def test_the_library_row_times_the_bare_mpi4py_call(name):
    """The library's run is mpi4py's own method with its arguments bound beforehand (nothing of
    pyar's runs per call), and it computes the collective (here at 1 rank, into out)."""
    from mpi4py import MPI

    record = pyar.collectives.collective(name)
    c = pyar.Comm(MPI.COMM_SELF)
    x_shape, out_shape = record.shapes(1, 4)
    x, out = np.arange(1.0, 5.0).reshape(x_shape), np.zeros(out_shape)
    run = bench._library_call(record, c, pyar.Op.SUM)(x, out)
    method = getattr(run, "func", run)
    assert getattr(method, "__self__", None) is c.mpi and \
        method.__name__ == record.library_name.rpartition(".")[2], run
    assert run() is None
    if record.name not in ("barrier", "bcast"):       # (bcast: in place, on x)
        assert np.array_equal(out.reshape(-1), x.reshape(-1))
    c.free()


def test_bench_takes_parameterized_names(tmp_path):
    """``-a`` keeps a name's parameters with it, commas included, into every row."""
    out = tmp_path / "bench.json"
    proc = run(3, "-m", "pyar", "bench", "--collective", "bcast", "-b", "8", "-e", "4K",
               "-f", "512", "-n", "2", "-w", "1", "-a", "knomial:k=3,binomial", "--json",
               str(out), timeout=300)
    assert proc.returncode == 0, explain(proc)
    rows = json.loads(out.read_text())["rows"]
    assert [r["algorithm"] for r in rows] == ["mpi", "knomial:k=3", "binomial"] * 2
    assert all(r[v]["wrong"] == 0 for r in rows for v in VARIANTS if r[v] is not None)
    assert parse_algorithms("segmented_ring:segment=4,ring") == ["segmented_ring:segment=4",
                                                                 "ring"]
    bad = run(2, "-m", "pyar", "bench", "-a", "knomial:k=1", "-n", "1", "-w", "1", timeout=120)
    assert bad.returncode == 2 and "must be an int >= 2" in bad.stderr, explain(bad)


@pytest.mark.parametrize("scale", [1.0, 1e4, 1e7])
def test_every_column_of_a_row_stays_apart_however_large_its_numbers(scale):
    # (a 4 KiB call that took 61 ms under load once printed a ratio of 1721.75 against the
    # #wrong column: "01721.75", and a test splitting the row read it as one field)
    measure = {"time_us": 12.5 * scale, "algbw": 3.25 * scale, "busbw": 1.5 * scale,
               "wrong": 0}
    row = {"size": 4096, "count": 1024, "type": "float32", "redop": "sum",
           "algorithm": "auto", "chosen": "ring", "out_of_place": measure, "in_place": measure,
           "vs_mpi": {bench.OUT_OF_PLACE: 1.5 * scale, bench.IN_PLACE: 2.5 * scale},
           "vs_best": 1.25 * scale}
    fields = bench._format_row(row).split()
    assert fields[:5] == ["4096", "1024", "float32", "sum", "auto:ring"]
    assert [float(f) for f in fields[5:]] == pytest.approx(
        [12.5 * scale, 3.25 * scale, 1.5 * scale, 0] * 2 + [1.5 * scale, 2.5 * scale,
                                                              1.25 * scale], rel=1e-3)
