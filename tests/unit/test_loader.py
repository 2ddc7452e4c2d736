"""pyar.core.loader: a user's module by path or by name, and one object of it."""

import pytest

from pyar.core import loader


def test_path_and_name(tmp_path):
    f = tmp_path / "my_mod.py"
    f.write_text("VALUE = 42\ndef fn():\n    return 'hi'\n")
    module = loader.import_spec(str(f))
    assert module.VALUE == 42
    assert loader.import_spec(str(f)) is module          # imported once
    assert loader.load(f"{f}:fn")() == "hi"
    assert loader.load("json:dumps")([1]) == "[1]"
    assert loader.load("json").__name__ == "json"


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        loader.import_spec(str(tmp_path / "missing.py"))
    with pytest.raises(ValueError, match="no module named"):
        loader.import_spec("no_such_module_xyz")
    with pytest.raises(ValueError, match="has no 'nope'.*dumps"):
        loader.load("json:nope")
