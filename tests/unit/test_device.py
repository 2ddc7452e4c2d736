"""Device buffers without a GPU: CUDA-awareness detection, `pyar info`, and pyar.runtime.device's logic on
stand-in cupy arrays under MPI (tests/helpers/fake_cupy.py says what that does and does not prove).
Tests on a real GPU: tests/gpu/test_gpu.py (`make gpu-check`)."""

import subprocess
import sys

import numpy as np
import pytest

import pyar
from launch import explain, run
from pyar.runtime import cuda


@pytest.fixture
def probes(monkeypatch):
    """Set what each probe answers: ``probes(kinds, query)`` (None = no answer)."""
    monkeypatch.delenv(cuda.ENV, raising=False)

    def set_(kinds, query):
        monkeypatch.setattr(cuda, "alloc_kinds", lambda: kinds)
        monkeypatch.setattr(cuda, "query_cuda_support", lambda: query)
    return set_


@pytest.mark.parametrize("kinds, query, aware, reason", [
    ("mpi,system", None, False, "mpi_memory_alloc_kinds = mpi,system"),
    ("mpi,system,cuda:device", 0, True, "mpi_memory_alloc_kinds = mpi,system,cuda:device"),
    ("mpi, cuda", None, True, "mpi_memory_alloc_kinds = mpi, cuda"),
    ("mpi,system,rocm:device", None, False, "mpi_memory_alloc_kinds = mpi,system,rocm"),
    ("mpi,system", 1, True, "MPIX_Query_cuda_support() = 1; mpi_memory_alloc_kinds = mpi,sys"),
    ("mpi,system", 0, False, "MPIX_Query_cuda_support() = 0; mpi_memory_alloc_kinds"),
    (None, 1, True, "MPIX_Query_cuda_support() = 1"),
    (None, 0, False, "MPIX_Query_cuda_support() = 0"),
    (None, None, False, "no probe answered"),
])
def test_each_probe_decides_in_order(probes, kinds, query, aware, reason):
    probes(kinds, query)
    found = cuda.detect()
    assert found.aware is aware and found.reason.startswith(reason), found


@pytest.mark.parametrize("value, aware", [("0", False), ("1", True), (" 1 ", True), ("", None)])
def test_override_wins_over_the_probes(probes, monkeypatch, value, aware):
    probes("mpi,system,cuda", 1 - (aware or 0))
    monkeypatch.setenv(cuda.ENV, value)
    found = cuda.detect()
    if aware is None:                  # empty: not set, the probes decide
        assert found == (True, "mpi_memory_alloc_kinds = mpi,system,cuda")
    else:
        assert found == (aware, f"PYAR_CUDA_AWARE={value.strip()}")


@pytest.mark.parametrize("value", ["yes", "2", "true", "-1"])
def test_a_bad_override_is_a_clear_error(probes, monkeypatch, value):
    probes("mpi,system", 0)
    monkeypatch.setenv(cuda.ENV, value)
    with pytest.raises(ValueError, match=f"PYAR_CUDA_AWARE must be 0 .* or 1 .*got '{value}'"):
        cuda.detect()


def test_the_real_probes_on_this_mpi(monkeypatch):
    """The embedded mpich wheel: not CUDA-aware, and both probes say so."""
    monkeypatch.delenv(cuda.ENV, raising=False)
    if "MPICH" not in __import__("mpi4py.MPI").MPI.Get_library_version():
        pytest.skip("checks what the mpich wheel answers")
    assert cuda.alloc_kinds() == "mpi,system"
    assert any(p.endswith("libmpi.so.12") for p in cuda.libmpi_paths())
    assert cuda.query_cuda_support() == 0
    assert cuda.detect() == (False, "MPIX_Query_cuda_support() = 0; "
                                    "mpi_memory_alloc_kinds = mpi,system")


def test_libmpi_paths_reads_the_memory_map(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /opt/ompi/lib/libmpi.so.40.30.0\n"
        "7f01-7f02 r-xp 00000000 08:01 2 /usr/lib/libmpich.so.12\n"
        "7f02-7f03 r-xp 00000000 08:01 3 /site/mpi4py/MPI.cpython-311.so\n"
        "7f03-7f04 r--p 00000000 08:01 1 /opt/ompi/lib/libmpi.so.40.30.0\n"
        "7f04-7f05 rw-p 00000000 00:00 0 \n")
    assert cuda.libmpi_paths(str(maps)) == ["/opt/ompi/lib/libmpi.so.40.30.0",
                                            "/usr/lib/libmpich.so.12"]
    assert cuda.libmpi_paths(str(tmp_path / "absent")) == []


def test_info_reports_cuda_awareness_and_gpu():
    env = {k: v for k, v in __import__("os").environ.items() if k != cuda.ENV}
    proc = subprocess.run([sys.executable, "-m", "pyar", "info"], capture_output=True,
                          text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    aware = [line for line in proc.stdout.splitlines() if line.startswith("CUDA-aware MPI: ")]
    assert len(aware) == 1 and aware[0].split(" (")[0] in ("CUDA-aware MPI: no",
                                                          "CUDA-aware MPI: yes"), proc.stdout
    assert any(line.startswith("GPU buffers: ") for line in proc.stdout.splitlines()), proc.stdout
    bad = subprocess.run([sys.executable, "-m", "pyar", "info"], capture_output=True, text=True,
                         timeout=120, env={**env, cuda.ENV: "maybe"})
    assert bad.returncode == 2 and "PYAR_CUDA_AWARE must be 0" in bad.stderr, bad.stderr


def test_non_arrays_are_refused_by_the_device_path():
    for call in (lambda: pyar.allgather([1.0]), lambda: pyar.bcast((1, 2)),
                 lambda: pyar.reduce_scatter(np.float32(1.0))):
        with pytest.raises(TypeError, match="must be a numpy array or a cupy array"):
            call()


@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("aware", ["0", "1"])
def test_device_path_logic_on_stand_in_arrays(nprocs, aware):
    proc = run(nprocs, "tests/helpers/device_check.py", timeout=240, env={cuda.ENV: aware})
    assert proc.returncode == 0, explain(proc)
    mode = "direct" if aware == "1" else "staged"
    assert f"device_check: {nprocs} ranks, {mode}: every collective" in proc.stdout, explain(proc)
