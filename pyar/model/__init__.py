"""What a schedule costs and does without MPI: the simulator (every rank in one process), the
alpha-beta-gamma cost model, and ``auto``'s choice of algorithm."""
