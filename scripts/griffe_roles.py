"""A griffe extension for the API reference (mkdocs.yml): pyar's docstrings are written for
``help()`` and Sphinx-style readers, with roles such as ``:func:`pyar.allreduce```; in the
Markdown that mkdocstrings renders, a role becomes the code span it names."""

import re

import griffe

ROLE = re.compile(r":[a-z]+:`~?([^`]*)`")
DOCTEST = re.compile(r"^(?P<indent>[ \t]*)>>> ", re.M)


def plain(text: str) -> str:
    """``:class:`~a.B``` -> ```a.B```: the role's target as a code span."""
    return ROLE.sub(lambda m: f"`{m.group(1)}`", text)


class Roles(griffe.Extension):
    """Every docstring's roles made code spans, before it is parsed."""

    def on_instance(self, *, obj, **kwargs) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain(obj.docstring.value)
