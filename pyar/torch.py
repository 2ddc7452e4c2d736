"""``pyar.torch``: PyTorch's entry to pyar (the ``torch`` extra): tensors in the collectives,
the DDP communication hook (:mod:`pyar.integrations.torch`) and the ``torch.distributed``
backend ``"pyar"`` (:mod:`pyar.integrations.torch_backend`), registered on import::

    import pyar.torch
    torch.distributed.init_process_group("pyar")      # under mpiexec

Importing it imports torch; without torch it is an ImportError naming the extra."""

try:
    import torch  # noqa: F401  (the optional heavy dependency this module is for)
except ImportError as e:        # (say which extra brings it)
    raise ImportError("pyar.torch needs PyTorch: pip install 'pyar[torch]'") from e

from .integrations.torch import *  # noqa: F401,F403,E402
from .integrations.torch import __all__ as _hook_names  # noqa: E402
from .integrations.torch_backend import (BACKEND, ProcessGroupPyar, PyarWork,  # noqa: E402
                                         register)

register()

__all__ = [*_hook_names, "BACKEND", "ProcessGroupPyar", "PyarWork", "register"]
