"""``python stacks_on_term.py SCRIPT ARGS``: run SCRIPT as ``__main__``, and if the process gets
SIGTERM, print every thread's Python stack to stderr before it ends. A test's timeout ends a
hung ``mpiexec`` so (its ranks get SIGTERM): the report then shows where each rank waited."""

import faulthandler
import runpy
import signal
import sys

faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
