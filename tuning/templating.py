"""The package's Jinja2 templates (``tuning/templates/``, StrictUndefined): one environment for the
switch renderer (:mod:`tuning.render`) and the node files domain (:mod:`tuning.node.files`).

A template is compiled once per process (``auto_reload`` off: the package's templates do not change
while fabtune runs, and a fleet render would otherwise ``stat`` the file for each of its 50,000
renders)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import jinja2

#: the package's own templates folder (symbolic links resolved once per process)
_PACKAGE_TEMPLATES = Path(__file__).resolve().parent / "templates"
_PACKAGE_ROOT = str(_PACKAGE_TEMPLATES)


def templates_dir() -> Path:
    """The package's ``tuning/templates/`` folder (``FABTUNE_TEMPLATES`` overrides); inside the
    package so that an installed wheel renders too."""
    return Path(_root())


def _root() -> str:
    """:func:`templates_dir` as text (a fleet render asks 50,000 times: no Path built for it)."""
    env = os.environ.get("FABTUNE_TEMPLATES")
    return str(Path(env)) if env else _PACKAGE_ROOT


@lru_cache(maxsize=4)
def _env(root: str) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(root), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, auto_reload=False)


@lru_cache(maxsize=64)
def _template(root: str, name: str) -> jinja2.Template:
    """The compiled template ``name`` of ``root`` (Jinja's own cache answers the same template, at
    the cost of a loader look-up per render). A missing one raises each time (nothing remembered)."""
    return _env(root).get_template(name)


def render_template(template: str, **context: object) -> str:
    """Render one template from :func:`templates_dir`.

    Raises:
        jinja2.TemplateNotFound: no such template there; jinja2.UndefinedError: the template reads
            a name ``context`` lacks.
    """
    return _template(_root(), template).render(**context)
