"""``pyar.torch``: PyTorch's entry to pyar (the ``torch`` extra), implemented in
:mod:`pyar.integrations.torch`; importing it imports torch."""

from .integrations.torch import *  # noqa: F401,F403
from .integrations.torch import __all__  # noqa: F401
