"""The picture `make run` draws: time and busbw against size, both variants,
auto and the MPI library standing out, the x axis ending at the data, a title that says
what ran."""

import types

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pyar.cli import bench  # noqa: E402


def measure(us, size):
    return {"time_us": us, "algbw": size / us / 1e3, "busbw": size / us / 1e3, "wrong": 0}


def report():
    rows = []
    for size in (8, 64, 512, 4096):
        for name, factor in (("mpi", 1.0), ("ring", 1.5), ("auto", 0.8)):
            rows.append({"size": size, "algorithm": name,
                         "out_of_place": measure(10 * factor + size / 100, size),
                         "in_place": measure(9 * factor + size / 100, size)})
        rows.append({"size": size, "algorithm": "gloo", "out_of_place": None,
                     "in_place": measure(40 + size / 50, size)})
    config = {"collective": "allreduce", "ranks": 4, "dtype": "float32", "op": "sum",
              "baseline": "comm.Allreduce", "algorithms": ["mpi", "ring", "auto", "gloo"],
              "mpi_library": "Open MPI v5.0.11,   package: Open MPI"}
    return {"config": config, "rows": rows}


@pytest.fixture
def figure(monkeypatch, tmp_path):
    """The figure bench.plot draws (kept open), and the file it wrote."""
    kept = types.SimpleNamespace(**{k: getattr(plt, k) for k in dir(plt) if not k.startswith("_")})
    kept.close = lambda fig: None
    monkeypatch.setattr(bench, "pyplot", lambda: kept)
    path = tmp_path / "bench.png"
    bench.plot(report(), str(path))
    fig = plt.gcf()
    yield fig, path
    plt.close(fig)


def test_two_panels_time_log_log_and_busbw_ending_at_the_data(figure):
    fig, path = figure
    assert path.stat().st_size > 10_000
    times, bandwidths = fig.axes
    assert times.get_xscale() == times.get_yscale() == "log"
    assert "time" in times.get_ylabel() and "bus bandwidth" in bandwidths.get_ylabel()
    for ax in (times, bandwidths):
        assert ax.get_xlim() == pytest.approx((8, 4096))
    title = fig._suptitle.get_text()
    assert "allreduce" in title and "4 ranks" in title and "float32" in title
    assert "Open MPI v5.0.11, package: Open MPI" in title


def test_both_variants_drawn_and_auto_and_the_library_stand_out(figure):
    fig, _ = figure
    times = fig.axes[0]
    lines = times.get_lines()
    # out of place solid, in place dashed; gloo has only in place, and still a legend entry
    assert len(lines) == 3 * 2 + 1
    assert sum(line.get_linestyle() == "--" for line in lines) == 4
    thin = max(line.get_linewidth() for line in lines if line.get_alpha() is not None)
    stand_out = [line for line in lines if line.get_linewidth() > 2 * thin]
    assert len(stand_out) == 2 * 2 + 1         # mpi and auto, both variants; gloo
    assert {line.get_color() for line in stand_out} >= {"black", "tab:red"}
    labels = fig.axes[1].get_legend().get_texts()
    names = [t.get_text() for t in labels]
    assert names[:4] == ["mpi (comm.Allreduce)", "ring", "auto", "gloo"]
    assert names[-2:] == ["out of place", "in place"]
