"""Python source as code: the syntax trees that a code digest counts.

Comments, docstrings and layout do not change what a module does, so they do
not change its digest (``pipeline.code_digest`` over the project's packages;
:func:`source_digest` over one module outside them, a stage plugin). Standard
library only, so stages and the pipeline can both use it.
"""

from __future__ import annotations

import ast
import hashlib


def strip_docstrings(tree: ast.AST) -> None:
    """Remove the docstring of every module, class and function of ``tree``
    in place (an emptied body gets ``pass``)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]


def source_digest(text: str) -> str:
    """16 hex characters of sha256 over one module's top-level statements as
    syntax trees without docstrings (``ast.dump``, no line numbers): equal for
    sources that differ only in comments, docstrings and layout.

    Raises:
        SyntaxError: ``text`` is not Python.
    """
    tree = ast.parse(text)
    strip_docstrings(tree)
    return hashlib.sha256("\n".join(ast.dump(s) for s in tree.body).encode()).hexdigest()[:16]
