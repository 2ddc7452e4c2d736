"""Running collectives on real ranks: settings, the Comm, the compiled plans and their
transports (MPI point-to-point, shared-memory mailboxes, CUDA), the one wait and its event
hook, failure notices, the flight recorder's ring, and the MPI library's own collectives as
the baseline. The lowest layer that imports mpi4py (the layers below never start MPI).

Importing it tells the tuner which MPI library it tunes for
(:func:`pyar.model.tuner.use_library`)."""

from ..model import tuner as _tuner
from . import library as _library

_tuner.use_library(_library.current)
