"""Turn pydantic validation errors into fabtune's one-line InputError: the file that set the
key, the dotted key, and what is allowed (a ``lo..hi`` range, the enum values, the known keys).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from tuning.errors import InputError

_RANGE = {"less_than_equal", "greater_than_equal", "less_than", "greater_than"}
#: pydantic strict type errors -> what the key allows (no coercion: ``true`` is not 1, ``22.5`` not 22)
_TYPES = {"int_type": "an integer", "int_from_float": "an integer", "bool_type": "true or false",
          "string_type": "a string", "dict_type": "a mapping", "list_type": "a list",
          "model_type": "a mapping", "model_attributes_type": "a mapping"}


def _submodel(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    return next((a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)), None)


def field_at(model: type[BaseModel], loc: list[str]) -> tuple[type[BaseModel] | None, Any]:
    """Walk a validation location: (the model that holds the last part, its FieldInfo or None)."""
    cls: type[BaseModel] | None = model
    loc = [p for p in loc if not p.isdigit()]  # list indices (nics.0.rail)
    for i, part in enumerate(loc):
        if cls is None or part not in cls.model_fields:
            return cls, None
        info = cls.model_fields[part]
        if i == len(loc) - 1:
            return cls, info
        cls = _submodel(info.annotation)
    return cls, None


def _range(info: Any) -> str | None:
    lo = next((x.ge for x in info.metadata if hasattr(x, "ge")), None)
    hi = next((x.le for x in info.metadata if hasattr(x, "le")), None)
    return None if lo is None and hi is None else f"{lo}..{hi}"


def described(value: Any) -> str:
    """A value as a load message names it: ``'4200' is a str``, ``True is a bool``; a YAML null (a key
    with nothing after it, ``pfc_priority:``) is ``no value (an empty YAML key)``, not ``None is a
    NoneType``."""
    kind = type(value).__name__
    return "no value (an empty YAML key)" if value is None else f"{value!r} is {'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def _message(first: dict, model: type[BaseModel], loc: list[str], host: str) -> str:
    kind, got = first["type"], first.get("input")
    holder, info = field_at(model, loc)
    if kind == "extra_forbidden":
        allowed = ", ".join(sorted(holder.model_fields)) if holder else "?"
        return f"unknown key; allowed: {allowed}"
    if kind == "missing":
        return f"required for {host} but set nowhere (host_vars/{host}.yml missing?)"
    if kind in _RANGE and info is not None and _range(info):
        return f"{got!r} is outside {_range(info)}"
    if isinstance(got, dict) and {"__ansible_vault", "__ansible_unsafe"} & set(got):
        return "an Ansible !vault or !unsafe value; fabtune reads its own settings as plain values"
    if kind in _TYPES:
        rng = f" in {_range(info)}" if info is not None and _range(info) else ""
        return f"{described(got)}; allowed: {_TYPES[kind]}{rng}"
    if kind == "too_short":
        return f"needs at least {first.get('ctx', {}).get('min_length', 1)} entry (got none)"
    msg = first["msg"].removeprefix("Value error, ")
    expected = (first.get("ctx") or {}).get("expected")
    return f"{got!r}: {msg} (allowed: {expected})" if expected else msg


def validation_error(err: ValidationError, model: type[BaseModel], sources: dict[str, str], host: str) -> InputError:
    """The first error of ``err`` as an InputError naming file, key and the allowed values."""
    first = err.errors()[0]
    loc = [str(p) for p in first["loc"] if p != "[key]"]
    src = sources.get(loc[0], "inventory") if loc else "inventory"
    if first["type"] == "missing" and loc:
        src = f"host_vars/{host}.yml"
    return InputError(src, ".".join(loc) or "-", f"{_message(first, model, loc, host)} (host {host})")
