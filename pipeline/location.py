"""Where versions live: one rule for ``build``, every command and the loader.

The *corpora root* (the folder holding ``<VERSION>/``, ``.tmp-<VERSION>/``,
``.work/`` and the build locks) is, first match wins:

1. an explicit path: ``--corpora-root`` on the command line,
   ``corpora_root=`` in Python (relative to the working directory);
2. ``$MINDCORPUS_CORPORA_DIR`` (relative to the working directory);
3. the config's ``corpora_dir``: the config given (``--config``), else
   ``configs/<VERSION>.yaml`` when it exists, else ``configs/default.yaml``;
   a relative ``corpora_dir`` is relative to the repository that holds the
   config (the parent of its ``configs/`` folder; the package's repository
   for a config elsewhere), which is where ``build`` has always put it;
4. ``corpora`` under the package's repository (no config file found).

A version is named either by a *name* (``v1``: looked up under the root) or by
a *path* (anything with a ``/``, or a ``Path``): the directory itself. A bare
name is never looked up in the working directory.

Light on purpose (``pathlib``, ``yaml`` and the file names of
:mod:`pipeline.layout`): the loader and the lineage lookup import it inside
training jobs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import yaml

from pipeline.layout import MANIFEST

REPO_ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = REPO_ROOT / "configs"
ENV = "MINDCORPUS_CORPORA_DIR"
DEFAULT_CORPORA_DIR = "corpora"  # the config's default (pipeline.config._BuildBase.corpora_dir)


class CorporaRoot(NamedTuple):
    """The corpora root and which rule chose it (for error messages)."""

    path: Path
    origin: str


def default_config_path(version: str | None) -> Path:
    """``configs/<version>.yaml`` if it exists, else ``configs/default.yaml``
    (the config ``build`` reads when none is given)."""
    if version and "/" not in version:
        own = CONFIG_DIR / f"{version}.yaml"
        if own.is_file():
            return own
    return CONFIG_DIR / "default.yaml"


def config_base(config_path: Path) -> Path:
    """The folder a config's relative paths (``corpora_dir``, source paths)
    start from: the repository holding its ``configs/`` folder, else the
    package's repository."""
    parent = Path(config_path).resolve().parent
    return parent.parent if parent.name == "configs" else REPO_ROOT


def _corpora_dir_of(config_path: Path) -> str:
    """``corpora_dir`` of a config file, read without validating the rest
    (the build validates; a lookup needs this one key).

    Raises:
        ValueError: the file is unreadable, not YAML, or ``corpora_dir`` is
            not a string.
    """
    try:
        data = yaml.safe_load(Path(config_path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{config_path}: cannot read config: {exc.strerror}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{config_path}: invalid YAML: {str(exc).splitlines()[0]}") from None
    value = (data or {}).get("corpora_dir", DEFAULT_CORPORA_DIR) if isinstance(data, dict) else DEFAULT_CORPORA_DIR
    if not isinstance(value, str) or not value:
        raise ValueError(f"{config_path}: corpora_dir must be a non-empty string, got {value!r}")
    return value


def corpora_root(explicit: str | Path | None = None, config_path: str | Path | None = None,
                 version: str | None = None, corpora_dir: str | None = None) -> CorporaRoot:
    """The corpora root by the rule of the module docstring.

    Args:
        explicit: ``--corpora-root`` / ``corpora_root=``; wins when given.
        config_path: the config file (``--config``); default
            :func:`default_config_path` of ``version``.
        version: the version name (picks ``configs/<version>.yaml``).
        corpora_dir: the config's ``corpora_dir`` when the caller has already
            validated the config (``build``); otherwise it is read from
            ``config_path``.

    Returns:
        ``(path, origin)``; ``path`` is absolute.

    Raises:
        ValueError: the config that decides cannot be read (see
            :func:`_corpora_dir_of`).
    """
    if explicit is not None and str(explicit) != "":
        return CorporaRoot(Path(explicit).absolute(), "--corpora-root")
    env = os.environ.get(ENV)
    if env:
        return CorporaRoot(Path(env).absolute(), f"${ENV}")
    path = Path(config_path) if config_path is not None else default_config_path(version)
    if corpora_dir is None:
        if not path.is_file():
            return CorporaRoot((REPO_ROOT / DEFAULT_CORPORA_DIR).absolute(), "the default (no config file)")
        corpora_dir = _corpora_dir_of(path)
    return CorporaRoot((config_base(path) / corpora_dir).absolute(), f"corpora_dir of {path}")


def is_version_path(version: str | Path) -> bool:
    """Whether ``version`` names a directory (a ``Path``, or text with a
    ``/``, or ``.``/``..``) rather than a version name under the root."""
    if isinstance(version, Path):
        return True
    text = str(version)
    return "/" in text or os.sep in text or text in (".", "..")


def resolve_version(version: str | Path, root: str | Path | None = None,
                    config_path: str | Path | None = None) -> Path:
    """The directory of a published version.

    Args:
        version: a version name (looked up under the corpora root, see
            :func:`corpora_root`) or a version directory's path.
        root: an explicit corpora root.
        config_path: the config whose ``corpora_dir`` applies.

    Returns:
        The directory; it holds ``manifest.json`` (its content is not read).

    Raises:
        FileNotFoundError: no ``manifest.json`` there; the message names the
            path looked at and the rule that chose the root.
        ValueError: the config that decides the root cannot be read.
    """
    if is_version_path(version):
        path = Path(version)
        if (path / MANIFEST).is_file():
            return path
        raise FileNotFoundError(f"no corpus version at {path} (no {path / MANIFEST})")
    found = corpora_root(root, config_path, str(version))
    path = found.path / str(version)
    if (path / MANIFEST).is_file():
        return path
    raise FileNotFoundError(f"no corpus version {str(version)!r}: no {path / MANIFEST} (corpora root from "
                            f"{found.origin}; choose another with --corpora-root, ${ENV} or --config)")
