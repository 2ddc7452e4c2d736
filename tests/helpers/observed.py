"""One 2-rank run of tests/helpers/observe_check.py with the logs, the timeline and the flight
recorder's dumps going to a fresh folder, shared by test_log, test_recorder and test_trace."""

import functools
import tempfile
from pathlib import Path

from launch import explain, run


@functools.lru_cache(maxsize=None)
def observed():
    """(folder, proc) of the run; it must have succeeded."""
    folder = Path(tempfile.mkdtemp(prefix="pyar-observed-"))
    proc = run(2, "tests/helpers/observe_check.py", timeout=120, env={
        "PYAR_DEBUG": "TRACE", "PYAR_DEBUG_FILE": str(folder / "log.%r.txt"),
        "PYAR_TRACE": str(folder / "trace.json"), "PYAR_DUMP_DIR": str(folder / "dumps")})
    assert proc.returncode == 0, explain(proc)
    return folder, proc
