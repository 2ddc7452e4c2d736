"""Import a user's module by path or name, so what it registers is a first-class name everywhere.

``pyar sim|model|bench|tune|draw|verify --load SPEC`` and ``pyar verify path.py:function`` use it.
A SPEC is ``path/to/file.py`` or a dotted module name, optionally followed by ``:name`` for one
object of it (``load`` returns that object; ``import_spec`` only imports).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys


def import_spec(spec: str):
    """Import ``path.py`` (as a module named after the file) or a dotted module name, once."""
    module = spec.partition(":")[0]
    if module.endswith(".py") or os.sep in module or "/" in module:
        path = os.path.abspath(module)
        if not os.path.isfile(path):
            raise ValueError(f"--load {spec}: no such file {path}")
        name = "pyar_user_" + os.path.splitext(os.path.basename(path))[0]
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == path:
            return sys.modules[name]
        found = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(found)
        sys.modules[name] = loaded
        try:
            found.loader.exec_module(loaded)
        except BaseException:
            del sys.modules[name]
            raise
        return loaded
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        raise ValueError(f"--load {spec}: no module named {e.name!r} (give a dotted module "
                         f"name on sys.path, or a path to a .py file)") from None


def load(spec: str):
    """The object ``name`` of ``module:name`` (after importing the module), else the module."""
    loaded = import_spec(spec)
    name = spec.partition(":")[2]
    if not name:
        return loaded
    try:
        return getattr(loaded, name)
    except AttributeError:
        public = sorted(n for n in vars(loaded) if not n.startswith("_"))
        raise ValueError(f"{spec}: module {loaded.__name__} has no {name!r} "
                         f"(it has: {', '.join(public) or 'nothing public'})") from None


def load_all(specs) -> None:
    """Import every ``--load`` given (a list, or None)."""
    for spec in specs or ():
        import_spec(spec)

