"""A collective's schedule and int64 inputs for the simulator's tests, as hypothesis draws them."""

import numpy as np

import pyar
from pyar import collectives
from pyar.cli import sim as workbench
from pyar.core.topology import Topology


def case(collective, name, n, c, root):
    """(record, schedule, inputs) of ``name``'s ``collective`` on ``n`` ranks, ``c`` elements
    per block, rooted at ``root % n`` where it has a root (3-rank nodes from 4 ranks on);
    inputs None where the collective moves nothing."""
    record = collectives.collective(collective)
    moves = record.count(1, n) > 0
    shape = record.shapes(n, c)[0] if moves else (0,)
    x_count = int(np.prod(shape))
    topology = Topology.regular(n, 3) if n > 3 else None
    schedule = pyar.schedule(name, n, record.count(x_count, n) if moves else 0,
                             collective=collective, topology=topology,
                             root=root % n if record.rooted else 0)
    inputs = workbench.samples(n, x_count, "int64", "sum").reshape(n, *shape) if moves \
        else None
    return record, schedule, inputs
