"""The CLI's drawings go through matplotlib (the ``plot`` extra) on a file-only backend:
:func:`pyplot` is the one place that imports it, when a drawing is made."""


def pyplot():
    """matplotlib.pyplot on a file-only backend; ValueError if matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ValueError(f"--plot needs matplotlib (pip install 'pyar[plot]'): {e}") from None
    return plt
