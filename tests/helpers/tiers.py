"""What ``make test`` runs of the exhaustive sweeps, and what only ``make test-all`` adds
(the parameters marked ``full``).

A sweep over every rank count up to 64 runs, in ``make test``, 1-32 (every shape a small
job takes: 1, odd, prime, the powers of two and their neighbours) and 48, 63 and 64 (a
power of two past 32, its neighbour below, and a count that is neither); ``make test-all``
runs every count. A sweep's cost grows with the rank count, so the tier is about a quarter
of the whole."""

import pytest

UP_TO_64 = {*range(1, 33), 48, 63, 64}


def tiered(values, tier):
    """``values`` as pytest parameters, those not in ``tier`` marked ``full``."""
    return [pytest.param(v, marks=() if v in tier else pytest.mark.full) for v in values]


def sizes_up_to_64():
    """Every rank count 1-64 as parameters, those outside :data:`UP_TO_64` marked ``full``."""
    return tiered(range(1, 65), UP_TO_64)
