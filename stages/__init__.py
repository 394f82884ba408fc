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


class RegistryError(ValueError):
    """Two stages share a name or an order, a plugin module cannot be
    imported, or a stage class lacks ``name``/``order``/``Config``."""


def _stage_classes(module) -> list[type]:
    from stages.base import Stage

    return [obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Stage) and obj is not Stage and obj.__module__ == module.__name__
            and "name" in obj.__dict__]


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
        for cls in _stage_classes(module):
            if not isinstance(cls.__dict__.get("order"), int):
                raise RegistryError(f"{module_name}:{cls.__name__}: a stage needs an integer `order`")
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
    return getattr(importlib.import_module(module), cls)


def stage_module(name: str, plugins: Iterable[str] = ()) -> str:
    """The module a stage's code digest starts from: the dotted module that
    defines stage ``name``, or, for a stage that is a package of this one
    (``stages.dedup.stage``), the package (``stages.dedup``: its
    ``__init__`` re-exports the package's parts, so the digest covers them)."""
    module = registry(tuple(plugins))[name].split(":")[0]
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "stages" and len(parts) > 2 else module
