"""``pyar doctor DIR``: merge the flight recorder's dumps of a job and say what happened
(:mod:`pyar.observe.doctor`)."""

from ..observe import doctor


def main(args) -> int:
    return doctor.main(args.dir)
