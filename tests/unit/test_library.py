"""What pyar detects of the MPI library (pyar.runtime.library) and of its mpiexec (pyar.runtime.launch), on
the library this suite runs on (MPICH, or Open MPI under `make test MPI=openmpi`); the
collective probes run under MPI in tests/mpi/test_library.py."""

import os
import stat
import time

import pytest
from mpi4py import MPI

from pyar.runtime import launch, library
from pyar.model import tuner
from pyar.runtime import progress, shm

VERSIONS = [
    ("Open MPI v5.0.11, package: Open MPI user@localhost Distribution, ident: 5.0.11",
     "openmpi", "5.0.11"),
    ("MPICH Version:      5.0.2\nMPICH Release date: Fri Sep 25 2026", "mpich", "5.0.2"),
    ("Intel(R) MPI Library 2021.19 for Linux* OS", "impi", "2021.19"),
    ("MVAPICH Version:      3.0\nMVAPICH Release date: 2023", "mvapich", "3.0"),
    ("Some MPI", "unknown", ""),
]


@pytest.mark.parametrize("text,family,version", VERSIONS)
def test_family_and_version_come_from_the_version_string(text, family, version):
    assert library.family_of(text) == family
    assert library.version_of(text, family) == version


def test_the_running_library_is_named_as_mpi4py_names_it():
    lib = library.current()
    text = MPI.Get_library_version()
    assert lib.family == library.family_of(text) and lib.version in text
    assert lib.description and "\x00" not in lib.description
    assert lib.slug == f"{lib.family}-{lib.version}"
    if lib.family in library.EAGER_CVARS:       # MPICH and Open MPI both have MPI_T (Open
        assert library.EAGER_CVARS[lib.family] in lib.eager_source   # MPI's only once its
        assert lib.eager is not None or lib.family == "openmpi", lib   # sm transport is up)
        assert lib.eager is None or 1024 <= lib.eager <= 1 << 20, lib


def test_an_absent_control_variable_reads_as_none():
    assert library.read_cvar("pyar_no_such_variable") is None


def test_the_venvs_mpiexec_is_of_the_library_mpi4py_loaded():
    assert launch.launcher_family(launch.find_mpiexec()) == library.current().family


def _fake_mpiexec(tmp_path, says: str) -> str:
    path = tmp_path / "mpiexec"
    path.write_text(f"#!/bin/sh\necho '{says}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_open_mpi_gets_its_settings_and_the_callers_own_win(tmp_path):
    fake = _fake_mpiexec(tmp_path, "mpiexec (Open MPI) 5.0.11")
    args, env = launch.launch_settings(fake, {"OMPI_MCA_btl": "self,tcp"})
    assert args == ["--oversubscribe"]
    assert env["OMPI_MCA_pml"] == "ob1" and env["OMPI_MCA_osc"] == "^ucx"
    assert "OMPI_MCA_btl" not in env                    # the caller's setting stays
    assert ("OMPI_ALLOW_RUN_AS_ROOT" in env) == (os.geteuid() == 0)
    command, environ = launch.mpiexec_command(fake, 3, "python", "x.py", environ={})
    assert command == [fake, "--oversubscribe", "-n", "3", "python", "x.py"]
    assert environ["OMPI_MCA_btl"] == "self,sm"


@pytest.mark.parametrize("says,family", [("HYDRA build details:\n    Version: 5.0.2", "mpich"),
                                         ("Intel(R) MPI Library for Linux* OS, Version 2021.19",
                                          "impi"),
                                         ("something else", "unknown")])
def test_other_launchers_get_nothing_added(tmp_path, says, family):
    fake = _fake_mpiexec(tmp_path, says)
    assert launch.launcher_family(fake) == family
    assert launch.launch_settings(fake, {}) == ([], {})


def test_a_missing_mpiexec_is_unknown(tmp_path):
    assert launch.launcher_family(str(tmp_path / "absent")) == "unknown"


def test_the_defaults_take_another_librarys_eager_limit():
    try:
        for family, eager, expected in [("openmpi", 4096, 4096.0), ("mpich", 8192, None),
                                        ("openmpi", None, None)]:
            tuner.use_library(lambda: library.Library(family, "1.0", "", eager, "test", ()))
            params = tuner.defaults()
            if expected is None:
                assert params is tuner.DEFAULTS
            else:
                assert params.eager == expected and params._replace(eager=0) == \
                    tuner.DEFAULTS._replace(eager=0)
    finally:
        tuner.use_library(library.current)


def test_a_pool_on_one_rank_counts_its_cores_and_is_not_oversubscribed():
    comm = MPI.COMM_SELF.Dup()
    pool = shm.pool_of(comm)
    assert pool.cores == len(os.sched_getaffinity(0)) >= 1 and not pool.oversubscribed
    comm.Free()


@pytest.mark.parametrize("napping", [False, True])
def test_a_stalled_wait_naps_only_on_an_oversubscribed_node(monkeypatch, napping):
    """Past NAP_AFTER a wait sleeps NAP between polls where napping is set (a Pool found its
    node oversubscribed); elsewhere it only yields, however long it waits. The clock is a
    stand-in that moves a tenth of NAP_AFTER a poll, so a busy machine cannot skew it."""
    slept, yielded, ticks = [], [], iter(range(10**6))
    monkeypatch.setattr(progress, "napping", napping)
    monkeypatch.setattr(progress, "on_stall", None)
    monkeypatch.setattr(progress, "_sleep", slept.append)
    monkeypatch.setattr(progress, "_yield", lambda: yielded.append(1))
    monkeypatch.setattr(progress, "_monotonic", lambda: next(ticks) * progress.NAP_AFTER / 10)
    polls = iter(range(progress.SPINS + 100))
    progress.wait_for(lambda: next(polls) == progress.SPINS + 99, None, None)
    if napping:
        assert set(slept) == {progress.NAP} and len(slept) > 50 and 0 < len(yielded) <= 11
    else:
        assert not slept and len(yielded) == 100


def test_the_saturation_probe_agrees_with_one_overflow_the_library_folds_itself():
    import numpy as np

    a, b = np.full(256, 100, np.int8), np.full(256, 100, np.int8)
    MPI.SUM.Reduce_local(a, b)
    assert library.wraps(np.int8, "sum") == bool((b == -56).all())
    assert library.wraps(np.int8, "avg") == library.wraps(np.int8, "sum")
    assert all(library.wraps(t, "max") for t in ("int8", "uint16", "float32"))
    assert set(library.current().saturating) <= {f"{d} {o}" for d in
                                                 ("int8", "uint8", "int16", "uint16", "int32",
                                                  "uint32", "int64", "uint64")
                                                 for o in ("sum", "prod")}
