"""The package's Jinja2 templates (``tuning/templates/``, StrictUndefined): one environment for the
switch renderer (:mod:`tuning.render`) and the node files domain (:mod:`tuning.node.files`)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import jinja2


def templates_dir() -> Path:
    """The package's ``tuning/templates/`` folder (``FABTUNE_TEMPLATES`` overrides); inside the
    package so that an installed wheel renders too."""
    env = os.environ.get("FABTUNE_TEMPLATES")
    return Path(env) if env else Path(__file__).resolve().parent / "templates"


@lru_cache(maxsize=4)
def _env(root: str) -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.FileSystemLoader(root), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def render_template(template: str, **context: object) -> str:
    """Render one template from :func:`templates_dir`."""
    return _env(str(templates_dir())).get_template(template).render(**context)
