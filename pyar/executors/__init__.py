"""Executors run schedules: ``mpi`` on real ranks, ``sim`` on all ranks in one process."""
