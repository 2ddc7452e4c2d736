"""Seeing what the runtime does: logs (``PYAR_DEBUG``), the timeline (``PYAR_TRACE``), the
flight recorder's dumps and ``pyar doctor``. Each attaches itself through the runtime's hooks;
the runtime never imports them."""
