"""Pipeline stages, one module each, found by looking.

A stage is a :class:`stages.base.Stage` subclass with a ``name`` (also its
config section and its reason-code prefix) and an ``order`` (its place in the
build), defined in a module of this package (``stages/<name>.py`` or a
subpackage ``stages/<name>/``) or in a module named by the config's
``plugins`` list. Nothing else registers it: adding a stage is its module
plus its config section (docs/stages/adding_a_stage.md).

Discovery imports the stage modules (their heavy libraries, fastText, KenLM,
datasketch, are imported inside functions, so loading the config stays
light) and is cached per plugin list.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
from collections.abc import Iterable
from pathlib import Path


class RegistryError(ValueError):
    """Two stages share a name or an order, a plugin module cannot be
    imported, or a stage class lacks ``name``/``order``/``Config``."""


#: Names a stage cannot take: the build config's own sections and keys, and
#: the build's own work directories (``corpora/.work/<V>/<name>``).
RESERVED_NAMES = frozenset({"sources", "executor", "ingest", "output", "plugins", "seed", "corpora_dir",
                            "assemble", "cache", "fit"})


def _stage_classes(module, own: bool = True) -> list[type]:
    """Stage subclasses with a ``name`` in ``module``: defined there (built-in
    modules), or, with ``own=False`` (a plugin module, which may be a package
    re-exporting its stage), also imported into it."""
    from stages.base import Stage

    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Stage) and obj is not Stage and "name" in obj.__dict__
            and (obj.__module__ == module.__name__ if own else not obj.__module__.startswith("stages."))]


#: Plugin module -> digest of its source when this process imported it
#: (``common.source.source_digest``): a build refuses a plugin whose
#: file changed since, since this process would run the old code
#: (:func:`check_plugins_current`).
_IMPORTED: dict[str, tuple[int, str]] = {}


def _plugin_source(module) -> str | None:
    path = getattr(module, "__file__", None)
    if not path:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError:
        return None


def _remember(name: str, module) -> None:
    """Record the source digest of plugin ``module`` as imported (once per
    module object: a module imported again is recorded again)."""
    from common.source import source_digest

    text = _plugin_source(module)
    if text is not None and _IMPORTED.get(name, (None,))[0] != id(module):
        try:
            _IMPORTED[name] = (id(module), source_digest(text))
        except SyntaxError:
            pass


def check_plugins_current(plugins: Iterable[str]) -> None:
    """Raise :class:`RegistryError` when a plugin's file changed on disk since
    this process imported it (a second build in one process, a notebook):
    the driver would run the old code while fresh workers import the new.

    Raises:
        RegistryError: naming the module; restart the process (or
            ``importlib.reload`` it) to build with the new code.
    """
    import sys

    from common.source import source_digest

    for name in plugins:
        module = sys.modules.get(name)
        text = _plugin_source(module) if module is not None else None
        if text is None or name not in _IMPORTED or _IMPORTED[name][0] != id(module):
            continue
        try:
            now = source_digest(text)
        except SyntaxError:
            now = "syntax error"
        if now != _IMPORTED[name][1]:
            raise RegistryError(f"plugins: {name} changed on disk since this process imported it; this process "
                                "would run its old code: build in a new process")


def _builtin_modules() -> list[str]:
    """Every module of this package, subpackages' modules included."""
    import stages

    return [info.name for info in pkgutil.walk_packages(stages.__path__, "stages.")]


@functools.lru_cache(maxsize=None)
def registry(plugins: tuple[str, ...] = ()) -> dict[str, str]:
    """Every stage: name -> ``"module:Class"``, in build order.

    Args:
        plugins: extra modules (importable dotted names) that define stages,
            from the config's ``plugins``.

    Raises:
        RegistryError: a plugin cannot be imported; two stages share a name
            or an ``order``; a stage lacks ``order`` or a ``Config``.
    """
    from stages.base import BaseStageConfig

    if len(set(plugins)) != len(plugins):
        raise RegistryError(f"plugins: {sorted(p for p in set(plugins) if plugins.count(p) > 1)} listed twice")
    for module_name in plugins:
        if "/" in module_name or module_name.endswith(".py") or not all(
                part.isidentifier() for part in module_name.split(".")):
            raise RegistryError(f"plugins: {module_name!r} is not a module name: give the dotted name "
                                "(my_stages.urls) and put its directory on PYTHONPATH")
    found: dict[str, type] = {}
    modules = [(m, False) for m in _builtin_modules()] + [(m, True) for m in plugins]
    for module_name, is_plugin in modules:
        try:
            module = importlib.import_module(module_name)
        except Exception as exc:
            if is_plugin and isinstance(exc, ModuleNotFoundError) and exc.name == module_name.split(".")[0]:
                raise RegistryError(f"plugins: cannot import {module_name!r}: no such module on the Python path "
                                    "(install it, or add its directory to PYTHONPATH)") from None
            if is_plugin:
                raise RegistryError(f"plugins: importing {module_name!r} failed: {type(exc).__name__}: {exc}") \
                    from None
            raise
        classes = _stage_classes(module, own=not is_plugin)
        if is_plugin:
            if not classes:
                raise RegistryError(f"plugins: {module_name!r} defines no stage (a stages.base.Stage subclass with a "
                                    "`name`)")
            _remember(module_name, module)
        for cls in classes:
            order = cls.__dict__.get("order")
            if not isinstance(order, int) or isinstance(order, bool):
                raise RegistryError(f"{module_name}:{cls.__name__}: a stage needs an integer `order`")
            if not isinstance(cls.name, str) or not cls.name.isidentifier() or cls.name in RESERVED_NAMES:
                raise RegistryError(f"{module_name}:{cls.__name__}: stage name {cls.name!r} is not allowed (an "
                                    f"identifier, not one of {', '.join(sorted(RESERVED_NAMES))})")
            if not (isinstance(cls.Config, type) and issubclass(cls.Config, BaseStageConfig)):
                raise RegistryError(f"{module_name}:{cls.__name__}: its Config must derive from "
                                    "stages.base.StageConfig")
            bad = [c for c in cls.columns if not c.startswith(f"{cls.name}_")]
            if bad:
                raise RegistryError(f"{module_name}:{cls.__name__}: column(s) {bad} do not start with "
                                    f"{cls.name + '_'!r} (a stage's columns are prefixed by its name)")
            tallied = cls.tally_columns
            if isinstance(tallied, str) or not all(isinstance(c, str) for c in tallied):
                raise RegistryError(f"{module_name}:{cls.__name__}: tally_columns must be a tuple of column names, "
                                    f"not {tallied!r}")
            unknown = [c for c in tallied if c not in cls.columns]
            if unknown:
                raise RegistryError(f"{module_name}:{cls.__name__}: tally_columns {unknown} are not among its "
                                    "declared columns (Stage.columns)")
            nested = [c for c, spec in cls.columns.items() if spec.lineage and spec.dtype.strip().startswith(
                ("list", "large_list", "struct", "map", "fixed_size_list"))]
            if nested:
                raise RegistryError(f"{module_name}:{cls.__name__}: column(s) {nested} are marked lineage=True but "
                                    "are not scalar (a lineage segment carries small scalar columns; a list "
                                    "column stays in documents/ and decisions/, where explain shows it)")
            have = found.get(cls.name)
            if have is not None and have is not cls:
                raise RegistryError(f"stage name {cls.name!r} is defined twice: {_path(have)} and {_path(cls)}")
            found[cls.name] = cls
    by_order: dict[int, type] = {}
    for cls in found.values():
        if cls.order in by_order:
            raise RegistryError(f"stages {by_order[cls.order].name!r} and {cls.name!r} share order {cls.order}")
        by_order[cls.order] = cls
    return {cls.name: _path(cls) for _, cls in sorted(by_order.items())}


def _path(cls) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def stage_names(plugins: Iterable[str] = ()) -> list[str]:
    """Stage names in build order (built-in and ``plugins``)."""
    return list(registry(tuple(plugins)))


def stage_class(name: str, plugins: Iterable[str] = ()):
    """Return the Stage subclass registered under ``name`` (KeyError if none)."""
    module, cls = registry(tuple(plugins))[name].split(":")
    loaded = importlib.import_module(module)
    if module in plugins:
        _remember(module, loaded)
    return getattr(loaded, cls)


def stage_module(name: str, plugins: Iterable[str] = ()) -> str:
    """The module a stage's code digest starts from: the dotted module that
    defines stage ``name``, or, for a stage that is a package of this one
    (``stages.dedup.stage``), the package (``stages.dedup``: its
    ``__init__`` re-exports the package's parts, so the digest covers them)."""
    module = registry(tuple(plugins))[name].split(":")[0]
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "stages" and len(parts) > 2 else module
