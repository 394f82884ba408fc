"""Code digests: the source, data files and libraries that shape a phase's output.

A build reuses a finished ingest, stage or assembly only while its
fingerprint matches (``pipeline.build``); the fingerprint holds the config,
the upstream fingerprint, the seed and this digest, so that a changed
preset, regex, rule, reader or packer re-runs the phase that uses it (and,
through the upstream chain, every phase after it) and leaves the others
alone.

What a digest covers, from *roots* (``"stages.heuristics"``: a whole
module; ``"pipeline.build:ingest_phase"``: one top-level definition):

* **source**: the statements reached from the roots, followed through names
  (a function, class or constant a reached statement names, in its own
  module or, through an import, in another project module) and through
  string constants that name a top-level definition of the same module
  (lookups by name). A module root takes every statement of the module (a
  package's ``__init__.py`` also every name it imports: a package such as
  ``stages.heuristics`` or ``stages.dedup`` re-exports its submodules'
  names, so a stage that is a package is covered by its submodules); an
  imported name takes only the definitions it reaches, so a stage that
  imports ``common.hashing.id_hash`` does not re-run when another helper
  of that module changes. Each statement counts as its syntax tree (``ast.dump``, no line
  numbers) with docstrings removed: comments, docstrings and layout do not
  change a digest, any change to code does. Statements that run on import
  and bind no name (calls, ``if``/``try`` blocks) are taken whenever their
  module is.
* **data files**: a file under a project package's ``data/`` directory is
  taken when a reached statement names it (``"zh_script_chars.json"``); a
  reached statement that names ``"data"`` itself takes the whole directory.
* **libraries**: the installed version of every third-party package a
  reached statement imports (``fasttext`` -> ``fasttext-predict 0.9.2.4``),
  and the Python minor version.

Project packages are the top-level directories of the repository holding an
``__init__.py`` (``common``, ``pipeline``, ``stages``). Only ``.py`` source is
read, by paths relative to the repository, so a digest does not depend on the
checkout's path or on ``__pycache__``. Modules imported through ``importlib``
(``stages.stage_class``) are not followed: name them as roots. Files are read
on every call and parsed once per process and content; a stage's digest
costs ~0.05 s once its files are parsed (~0.3 s for the whole project).
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from common.source import source_digest, strip_docstrings

REPO_ROOT = Path(__file__).resolve().parent.parent

__all__ = ["CodeDigest", "code_digest", "source_digest"]


@dataclasses.dataclass(frozen=True)
class CodeDigest:
    """What shaped a phase's output, and one digest of it.

    Attributes:
        digest: 16 hex characters, sha256 of everything below.
        sources: source file (relative to the repository, ``stages/text.py``)
            -> 16 hex characters of sha256 over the normalised statements
            taken from it.
        definitions: for a source file of which only some statements were
            taken: the names they bind, sorted (absent: the whole file).
        data: data file (``stages/data/zh_script_chars.json``) -> 16 hex
            characters of sha256 of its bytes.
        libraries: distribution -> installed version (None when the import
            belongs to no installed distribution).
        python: the Python minor version (``3.11``).
    """

    digest: str
    sources: dict[str, str]
    definitions: dict[str, list[str]]
    data: dict[str, str]
    libraries: dict[str, str | None]
    python: str

    def facts(self) -> dict[str, Any]:
        """The digest as a JSON-able dict (for the manifest)."""
        return dataclasses.asdict(self)


@dataclasses.dataclass
class _Module:
    """One parsed project module."""

    name: str                                   # dotted: stages.langid
    path: str                                   # relative: stages/langid.py
    package: str                                # for relative imports: stages
    statements: list[ast.stmt]                  # top level, docstrings removed
    dumps: list[str]                            # ast.dump of each statement
    bindings: dict[str, list[int]]              # name -> statements binding it
    imports: dict[str, list[tuple[str, str | None]]]  # name -> (module, attribute)s it is bound to
    on_import: list[int]                        # statements that bind no name


# --------------------------------------------------------------------------- parsing

def _resolve(package: str, level: int, module: str | None) -> str:
    if not level:
        return module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (level - 1)] if level > 1 else parts
    return ".".join([*base, module] if module else base)


def _import_targets(node: ast.Import | ast.ImportFrom, package: str) -> list[tuple[str, str, str | None]]:
    """(bound name, module, attribute) of each name an import binds."""
    out = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.asname:
                out.append((alias.asname, alias.name, None))
            else:                                   # import a.b binds a (a.b reached as a.b.x)
                top = alias.name.split(".")[0]
                out.append((top, top, None))
                if "." in alias.name:
                    out.append((top, alias.name, None))
        return out
    module = _resolve(package, node.level, node.module)
    if module == "__future__":
        return []
    for alias in node.names:
        if alias.name == "*":
            out.append(("*", module, None))
        else:
            out.append((alias.asname or alias.name, module, alias.name))
    return out


def _bound_names(stmt: ast.stmt) -> set[str]:
    """Names a top-level statement binds (imports excluded)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    if isinstance(stmt, ast.Assign):
        scope: list[ast.AST] = list(stmt.targets)
    elif isinstance(stmt, (ast.AnnAssign, ast.AugAssign)):
        scope = [stmt.target]
    else:
        scope = [stmt]
    names: set[str] = set()
    for node in (n for part in scope for n in ast.walk(part)):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node is not stmt:
            names.add(node.name)
    return names


@functools.lru_cache(maxsize=512)
def _parse(source: str, rel_path: str, name: str, is_package: bool) -> _Module:
    tree = ast.parse(source, filename=rel_path)
    strip_docstrings(tree)
    package = name if is_package else name.rpartition(".")[0]
    statements, dumps = [], []
    bindings: dict[str, list[int]] = {}
    imports: dict[str, list[tuple[str, str | None]]] = {}
    on_import: list[int] = []
    for stmt in tree.body:
        if isinstance(stmt, (ast.Import, ast.ImportFrom)):
            for bound, module, attr in _import_targets(stmt, package):
                imports.setdefault(bound, []).append((module, attr))
            continue
        index = len(statements)
        statements.append(stmt)
        dumps.append(ast.dump(stmt, include_attributes=False))
        names = _bound_names(stmt)
        for bound in names:
            bindings.setdefault(bound, []).append(index)
        # A compound statement (if/try/with) may import too; it runs on import.
        if not names or not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef,
                                              ast.Assign, ast.AnnAssign, ast.AugAssign)):
            on_import.append(index)
            for node in ast.walk(stmt):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for bound, module, attr in _import_targets(node, package):
                        imports.setdefault(bound, []).append((module, attr))
    return _Module(name=name, path=rel_path, package=package, statements=statements, dumps=dumps,
                   bindings=bindings, imports=imports, on_import=on_import)


class _Project:
    """The project packages under ``root`` and their parsed modules."""

    def __init__(self, root: Path):
        self.root = root
        self.packages = {p.name for p in root.iterdir()
                         if p.is_dir() and (p / "__init__.py").is_file() and p.name.isidentifier()}
        self.data_files: dict[str, list[str]] = {}    # package dir -> its data files (relative paths)
        for pkg in sorted(self.packages):
            data = root / pkg / "data"
            if data.is_dir():
                self.data_files[pkg] = sorted(p.relative_to(root).as_posix() for p in data.rglob("*")
                                              if p.is_file() and "__pycache__" not in p.parts)

    def module(self, name: str) -> _Module | None:
        """The parsed project module ``name``, None when it is not one."""
        if not name or name.split(".")[0] not in self.packages:
            return None
        base = self.root.joinpath(*name.split("."))
        for path, is_package in ((base.with_suffix(".py"), False), (base / "__init__.py", True)):
            if path.is_file():     # read every time, parsed once per content
                return _parse(path.read_text(encoding="utf-8"), path.relative_to(self.root).as_posix(),
                              name, is_package)
        return None


# --------------------------------------------------------------------------- the closure

def _walk_code(node: ast.AST) -> Iterable[ast.AST]:
    """``ast.walk`` without function argument and return annotations (they
    shape no output; class-body annotations do, e.g. pydantic fields)."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for field, value in ast.iter_fields(current):
            if field in ("returns", "annotation") and isinstance(current, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                          ast.arg)):
                continue
            if isinstance(value, ast.AST):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, ast.AST))


class _Closure:
    def __init__(self, project: _Project):
        self.project = project
        self.taken: dict[str, set[int]] = {}           # module name -> statement indices
        self.modules: dict[str, _Module] = {}
        self.seen: set[tuple[str, str | None]] = set()
        self.data: set[str] = set()
        self.libraries: set[str] = set()
        self.pending: list[tuple[str, str | None]] = []

    def add(self, module: str, attr: str | None) -> None:
        self.pending.append((module, attr))

    def run(self) -> None:
        while self.pending:
            module, attr = self.pending.pop()
            if (module, attr) in self.seen:
                continue
            self.seen.add((module, attr))
            mod = self.project.module(module)
            if mod is None:
                top = module.split(".")[0]
                if top and top not in self.project.packages and top not in sys.stdlib_module_names:
                    self.libraries.add(top)
                continue
            if attr is not None and self.project.module(f"{module}.{attr}") is not None:
                self.add(f"{module}.{attr}", None)      # from package import submodule
                continue
            self._touch(mod)
            if attr is None:                            # the whole module
                for index in range(len(mod.statements)):
                    self._take(mod, index)
                if mod.path.endswith("/__init__.py"):   # a package: what it imports is what it exports
                    for targets in mod.imports.values():
                        for target in targets:
                            self.add(*target)
            elif attr in mod.bindings:
                for index in mod.bindings[attr]:
                    self._take(mod, index)
            else:
                for target in mod.imports.get(attr) or mod.imports.get("*", []):
                    self.add(*target)

    def _touch(self, mod: _Module) -> None:
        if mod.name not in self.modules:
            self.modules[mod.name] = mod
            self.taken[mod.name] = set()
            for index in mod.on_import:
                self._take(mod, index)

    def _take(self, mod: _Module, index: int) -> None:
        taken = self.taken[mod.name]
        if index in taken:
            return
        taken.add(index)
        for node in _walk_code(mod.statements[index]):
            if isinstance(node, ast.Name):
                self._name(mod, node.id)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in mod.bindings:
                    self._name(mod, node.value)
                self._data(mod, node.value)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for _, module, attr in _import_targets(node, mod.package):
                    self.add(module, attr)

    def _name(self, mod: _Module, name: str) -> None:
        if name in mod.bindings:
            for index in mod.bindings[name]:
                self._take(mod, index)
        else:
            for target in mod.imports.get(name, ()):
                self.add(*target)

    def _data(self, mod: _Module, value: str) -> None:
        if len(value) > 200:
            return
        pkg = mod.name.split(".")[0]
        files = self.project.data_files.get(pkg, ())
        if value == "data":
            self.data.update(files)
            return
        for rel in files:
            inside = rel.split("/", 1)[1]                  # data/x.json
            if value in (rel, inside, inside.split("/", 1)[1], os.path.basename(rel)):
                self.data.add(rel)


# --------------------------------------------------------------------------- the digest

@functools.lru_cache(maxsize=1)
def _distributions() -> dict[str, list[str]]:
    import importlib.metadata

    return importlib.metadata.packages_distributions()


def _library_versions(names: Iterable[str]) -> dict[str, str | None]:
    import importlib.metadata

    out: dict[str, str | None] = {}
    for name in sorted(names):
        dists = _distributions().get(name)
        if not dists:
            out[name] = None
            continue
        for dist in dists:
            try:
                out[dist] = importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                out[dist] = None
    return dict(sorted(out.items()))


def _sha16(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def code_digest(roots: Sequence[str], root: Path | None = None) -> CodeDigest:
    """The code digest of what ``roots`` reach (see the module docstring).

    Args:
        roots: ``"package.module"`` (the whole module) or
            ``"package.module:name"`` (one top-level definition and what it
            reaches), of project packages.
        root: the repository (default: this checkout).

    Returns:
        A :class:`CodeDigest`; equal for equal code whatever the checkout's
        path, the order of ``roots`` or ``__pycache__``.

    Raises:
        ValueError: a root names no project module, or no top-level name of it.
    """
    project = _Project(Path(root) if root is not None else REPO_ROOT)
    closure = _Closure(project)
    for spec in roots:
        module, _, attr = spec.partition(":")
        mod = project.module(module)
        if mod is None:
            raise ValueError(f"code digest root {spec!r}: no project module {module!r} under {project.root}")
        if attr and attr not in mod.bindings and attr not in mod.imports:
            raise ValueError(f"code digest root {spec!r}: {module} defines no {attr!r}")
        closure.add(module, attr or None)
    closure.run()
    sources: dict[str, str] = {}
    definitions: dict[str, list[str]] = {}
    for name, mod in sorted(closure.modules.items(), key=lambda kv: kv[1].path):
        taken = sorted(closure.taken[name])
        sources[mod.path] = _sha16("\n".join(mod.dumps[i] for i in taken).encode("utf-8"))
        if len(taken) < len(mod.statements):
            definitions[mod.path] = sorted({b for b, idx in mod.bindings.items() if set(idx) & set(taken)})
    data = {rel: _sha16((project.root / rel).read_bytes()) for rel in sorted(closure.data)}
    libraries = _library_versions(closure.libraries)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    digest = _sha16(json.dumps([sources, definitions, data, libraries, python], sort_keys=True).encode("utf-8"))
    return CodeDigest(digest=digest, sources=sources, definitions=definitions, data=data,
                      libraries=libraries, python=python)
