"""scripts/benchmarks.py writes BENCHMARKS.md from a run's JSON: one header, a table per
library, the cost model against measurement, and nothing of earlier runs, the commit or the
date."""

import json
import sys

from launch import ROOT

from pyar.model import cost, tuner

sys.path.insert(0, str(ROOT / "scripts"))
import benchmarks  # noqa: E402


def bench(times: dict) -> dict:
    """A bench JSON with ``times[(algorithm, size)] = us`` (out of place and in place)."""
    return {"rows": [{"algorithm": a, "size": s, "chosen": "ring" if a == "auto" else None,
                      "out_of_place": {"time_us": t, "busbw": 1.5},
                      "in_place": {"time_us": 2 * t, "busbw": 1.0}}
                     for (a, s), t in times.items()]}


def fake_run(where, commit):
    times = {("mpi", 8): 2.0, ("auto", 8): 3.0, ("mpi_init", 8): 1.0, ("auto_init", 8): 1.5,
             ("mpi", 64 << 20): 100.0, ("auto", 64 << 20): 50.0}
    (where / "bench-mpich.json").write_text(json.dumps(bench(times)))
    report = {"machine": {"host": "h", "system": "Linux", "cpu": "CPU", "cores": 2,
                          "python": "3.11"},
              "commit": commit, "date": "2026-12-03 10:00 UTC", "quick": False, "seconds": 5,
              "libraries": [{"name": "mpich 5.0.2", "tag": "mpich", "bench": "bench-mpich.json",
                             "plot": "bench-mpich.png", "mpi4py": "4", "numpy": "2",
                             "numba": "0.6", "pyar": "0.1.0"}],
              "overlap": "# overlap\n", "reproducible": "  1 MiB  0.4 / 0.4  8.9 / 9.0  22.0\n",
              "sim": [{"command": "pyar sim -N 64", "output": "x\n"}]}
    (where / "run.json").write_text(json.dumps(report))


def fake_model(where, times):
    """A tuning file with memory terms, an all-algorithms bench of ``times[(name, size)]``
    and a regret bench: auto's regret 1.0 at 8 B and 1.3 at 4 MiB."""
    params = cost.Params(1e-6, 1e-10, {"float32": 5e-11}, 1e-6, resident=1 << 19,
                         memory=((1 << 20, 2e-10, 1e-10, 2e-6), (64 << 20, 3e-10, 1e-10, 3e-6)))
    tuner.save(where / "tuning-mpich.json", params, {})
    (where / "model-mpich.json").write_text(json.dumps(bench(times)))
    regret = {"summary": {"auto_regret": [{"size": 8, "chosen": "ring", "regret": 1.0},
                                          {"size": 4 << 20, "chosen": "ring", "regret": 1.3}]}}
    (where / "regret-mpich.json").write_text(json.dumps(regret))
    report = json.loads((where / "run.json").read_text())
    report["model"] = {"library": "mpich", "tuning": "tuning-mpich.json",
                       "bench": "model-mpich.json", "regret": "regret-mpich.json"}
    (where / "run.json").write_text(json.dumps(report))
    return params


def test_the_model_table_puts_each_candidates_prediction_beside_its_measured_time(tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    fake_run(tmp_path, "aaa1111")
    names = tuner.candidates("allreduce")
    times = {(name, size): 1000.0 for name in [*names, "auto"] for size in (1 << 20, 4 << 20)}
    params = fake_model(tmp_path, times)
    benchmarks.main(["write", "--out", str(tmp_path), "--markdown", str(md)])
    text = md.read_text()
    assert "## The cost model against measurement" in text
    assert "| algorithm | 1 MiB: model / measured (us) | 4 MiB: model / measured (us) |" in text
    close = 0
    for name in names:
        cells = []
        for size in (1 << 20, 4 << 20):
            t = cost.estimate("allreduce", name, 2, size // 4, "float32", params)[0].time * 1e6
            assert t > 0
            close += abs(t / 1000 - 1) <= 0.25
            cells.append(f"{t:.0f} / 1000 ({t / 1000:.2f})")
        assert f"| {name} | {' | '.join(cells)} |" in text
    assert f"`auto` chose: 1 MiB ring, 4 MiB ring. Model and measurement agree within 25% " \
           f"in {close} of {2 * len(names)} cells" in text
    assert "within 10% at 1 of 2 sizes; over it at 4 MiB 1.30x." in text


def test_the_page_is_the_current_reference_only(tmp_path):
    md = tmp_path / "BENCHMARKS.md"
    fake_run(tmp_path, "aaa1111")
    benchmarks.main(["write", "--out", str(tmp_path), "--markdown", str(md)])
    text = md.read_text()
    assert text.startswith("# Benchmarks\n") and text.count("\n## mpich 5.0.2\n") == 1
    assert "| machine | CPU, 2 cores, Linux (h) |" in text
    assert "| 8 B | ring | 2.0 | 3.0 | 1.50x | 1.50x | 1.0 | 1.5 | 1.50x | 1.50 |" in text
    assert "| 64 MiB | ring | 100.0 | 50.0 | 0.50x | 0.50x | - | - | - | 1.50 |" in text
    assert "aaa1111" not in text and "2026-12-03" not in text and "History" not in text
    reproducible = text.index("## Reproducible sums")
    assert text.index("## Overlap") < reproducible < text.index("## The simulator at scale")
    assert "  1 MiB  0.4 / 0.4  8.9 / 9.0  22.0\n" in text[reproducible:]
    fake_run(tmp_path, "bbb2222")            # the next run's page is written afresh
    benchmarks.main(["write", "--out", str(tmp_path), "--markdown", str(md)])
    assert md.read_text() == text


def test_the_blocked_collectives_table_is_against_the_faster_library_call(tmp_path):
    """reduce_scatter and allgather rows: pyar's auto and auto_init over the faster of the
    library's blocking and persistent calls; a run without them has no such section."""
    md = tmp_path / "BENCHMARKS.md"
    fake_run(tmp_path, "aaa1111")
    benchmarks.main(["write", "--out", str(tmp_path), "--markdown", str(md)])
    assert "## Reduce-scatter and allgather" not in md.read_text()
    report = json.loads((tmp_path / "run.json").read_text())
    blocked = {}
    for collective, mpi, init in (("reduce_scatter", 400.0, 500.0), ("allgather", 300.0, 200.0)):
        blocked[collective] = f"{collective}-mpich.json"
        times = {("mpi", 16 << 20): mpi, ("mpi_init", 16 << 20): init,
                 ("auto", 16 << 20): 240.0, ("auto_init", 16 << 20): 160.0}
        (tmp_path / blocked[collective]).write_text(json.dumps(bench(times)))
    report["libraries"][0]["blocked"] = blocked
    (tmp_path / "run.json").write_text(json.dumps(report))
    benchmarks.main(["write", "--out", str(tmp_path), "--markdown", str(md)])
    text = md.read_text()
    assert text.count("## Reduce-scatter and allgather") == 1 and "### mpich 5.0.2" in text
    assert "| reduce_scatter | 16 MiB | ring | 400.0 | 500.0 | 240.0 | 160.0 | 0.60x | 0.40x |" \
        in text
    assert "| allgather | 16 MiB | ring | 300.0 | 200.0 | 240.0 | 160.0 | 1.20x | 0.80x |" in text
