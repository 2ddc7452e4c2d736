"""The layering rules that import-linter's contract (``.importlinter``, run by ``make test``)
does not state: below the CLI, no function imports pyar's own modules (every dependency is
visible at the top of its module), and the kernels import nothing of the rest of pyar."""

import ast
import pathlib

import pyar

PACKAGE = pathlib.Path(pyar.__file__).parent


def _imports_in_functions(path: pathlib.Path, root: pathlib.Path = PACKAGE.parent):
    tree = ast.parse(path.read_text())
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, ast.ImportFrom) and (
                        node.level or (node.module or "").split(".")[0] == "pyar"):
                    yield f"{path.relative_to(root)}:{node.lineno} in {function.name}"
                elif isinstance(node, ast.Import) and any(
                        a.name.split(".")[0] == "pyar" for a in node.names):
                    yield f"{path.relative_to(root)}:{node.lineno} in {function.name}"


def test_no_function_below_the_cli_imports_pyars_own_modules():
    found = [where for path in sorted(PACKAGE.rglob("*.py"))
             if "cli" not in path.relative_to(PACKAGE).parts[:1]
             for where in _imports_in_functions(path)]
    assert not found, "imports of pyar's own modules inside functions:\n" + "\n".join(found)


def test_the_check_finds_an_import_inside_a_function(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text("import pyar\n\n\ndef f():\n    from . import errors\n    import pyar.api\n"
                    "    import numpy\n    return errors\n")
    assert list(_imports_in_functions(path, tmp_path)) == ["probe.py:5 in f", "probe.py:6 in f"]
