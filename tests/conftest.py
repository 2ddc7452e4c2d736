import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

MPI_TESTS = Path(__file__).parent / "mpi"
# the flight recorder dumps on every pyar error: the errors tests provoke dump there, not in cwd
os.environ.setdefault("PYAR_DUMP_DIR", os.path.join(tempfile.gettempdir(), "pyar-test-dumps"))


def pytest_ignore_collect(collection_path, config):
    """tests/mpi runs under mpiexec, named explicitly (test_mpi_matrix.py does so)."""
    if collection_path == MPI_TESTS:
        return not any(Path(arg.split("::")[0]).resolve().is_relative_to(MPI_TESTS)
                       for arg in config.args)
    return None

settings.register_profile("pyar", deadline=None, max_examples=60,
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
