import os
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

MPI_TESTS = Path(__file__).parent / "mpi"
# the helpers (launch, the scripts run under mpiexec, the stand-in cupy), importable by name
sys.path.insert(0, str(Path(__file__).parent / "helpers"))
# the flight recorder dumps on every pyar error: the errors tests provoke dump there, not in cwd
os.environ.setdefault("PYAR_DUMP_DIR", os.path.join(tempfile.gettempdir(), "pyar-test-dumps"))


def pytest_ignore_collect(collection_path, config):
    """tests/mpi runs under mpiexec, named explicitly (test_mpi_matrix.py does so)."""
    if collection_path == MPI_TESTS:
        return not any(Path(arg.split("::")[0]).resolve().is_relative_to(MPI_TESTS)
                       for arg in config.args)
    return None

# PYAR_TEST_EXAMPLES: fewer examples per property (make test-quick draws 20)
settings.register_profile("pyar", deadline=None,
                          max_examples=int(os.environ.get("PYAR_TEST_EXAMPLES", "60")),
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("pyar")


@pytest.fixture
def scratch_registry():
    """Algorithms a test registers are forgotten after it."""
    from pyar.algorithms import _registry, generation

    saved = {collective: dict(table) for collective, table in _registry.items()}
    yield
    _registry.clear()
    _registry.update(saved)
    generation[0] += 1


def pytest_configure(config):
    config.addinivalue_line("markers", "mpiexec: launches mpiexec (or make) in a subprocess; "
                                       "make test-quick leaves these out")
    config.addinivalue_line("markers", "sweep: enumerated cases that PYAR_TEST_SHARD splits "
                                       "between runs (tests/mpi/conftest.py)")
    config.addinivalue_line("markers", "full: what only make test-all runs: the rest of the "
                                       "MPI matrix (tests/test_mpi_matrix.py) and of the "
                                       "exhaustive sweeps (tests/helpers/tiers.py)")


def pytest_collection_modifyitems(config, items):
    """Mark ``mpiexec`` every test whose function calls launch.run (tests/helpers/launch.py) or runs
    ``make``: what makes the whole suite slow, and what ``make test-quick`` leaves out. (A
    module whose jobs start elsewhere, in a fixture or in pyar verify, marks itself.)"""
    import dis

    import launch

    for item in items:
        function = getattr(item, "function", None)
        if function is None or getattr(item.module, "run", None) is not launch.run and \
                "make" not in function.__code__.co_consts:
            continue
        if "make" in function.__code__.co_consts or any(
                ins.opname == "LOAD_GLOBAL" and ins.argval == "run"
                for ins in dis.get_instructions(function)):
            item.add_marker(pytest.mark.mpiexec)
