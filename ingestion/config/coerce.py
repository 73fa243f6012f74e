"""YAML values to the typed config: each dataclass field from its key (camelCase, `key` metadata), checked by type.

A wrong type, a value outside a Literal, an unknown key (with the known ones listed) or a missing required key is
one ConfigError naming the file, the dotted key and the value; secrets are shown as '***' (`shown`). Generic over
the dataclasses of `model`, so a new section needs nothing here.

Not pydantic: its lax mode takes what this refuses (a set for a list of names, a number in one), its strict mode
refuses what this takes (a YAML list for a tuple, a number for a string), so each rule here would return as a
validator beside a translation of its errors into these messages, and its import and schema cost ~80 ms a command.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from ingestion import security
from ingestion.errors import ConfigError

_SECRET = security.SECRET_KEY


def build(cls: type[Any], data: Mapping[str, Any], file: Path, prefix: str, *, partial: bool = False) -> Any:
    """`cls` from `data`; `partial`: only check the keys given (a defaults file), build nothing."""
    hints = typing.get_type_hints(cls)
    remaining = dict(data)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("internal"):
            continue
        key = f.metadata.get("key", f.name)
        if key not in remaining:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and not partial:
                raise ConfigError(f"{file}: missing required key {prefix + key!r}")
            continue
        kwargs[f.name] = _coerce(hints[f.name], remaining.pop(key), file, prefix + key, partial=partial)
    if remaining:
        key, value = next(iter(remaining.items()))
        known = sorted([*(f.metadata.get("key", f.name) for f in dataclasses.fields(cls)
                          if not f.metadata.get("internal")), *([] if prefix else ["extends"])])  # read before
        raise ConfigError(f"{file}: unknown key {prefix + str(key)!r} (value {shown(str(key), value)}); "
                          f"known keys here: {', '.join(known)}")
    return None if partial else cls(**kwargs)


def _coerce(hint: Any, value: Any, file: Path, key: str, *, partial: bool = False) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [h for h in typing.get_args(hint) if h is not type(None)]
        if value is None and len(options) < len(typing.get_args(hint)):
            return None
        return _coerce(options[0], value, file, key, partial=partial)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value not in allowed:
            raise ConfigError(f"{file}: key {key!r} must be one of {list(allowed)}, got {shown(key, value)}")
        return value
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise ConfigError(f"{file}: key {key!r} must be a mapping, got {shown(key, value)}")
        return build(typing.cast(type, hint), value, file, key + ".", partial=partial)
    if origin is tuple and dataclasses.is_dataclass(typing.get_args(hint)[0]):  # a list of sections
        if not isinstance(value, list):
            raise ConfigError(f"{file}: key {key!r} must be a list of mappings, got {shown(key, value)}")
        item = typing.cast(type, typing.get_args(hint)[0])
        return tuple(_coerce(item, v, file, f"{key}[{i}]", partial=partial) for i, v in enumerate(value))
    if origin in (Mapping, dict) and dataclasses.is_dataclass(typing.get_args(hint)[1]):  # sections by name
        if not isinstance(value, dict):
            raise ConfigError(f"{file}: key {key!r} must be a mapping of sections by name, got {shown(key, value)}")
        item = typing.cast(type, typing.get_args(hint)[1])
        return {str(k): _coerce(item, v, file, f"{key}.{k}", partial=partial) for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            raise ConfigError(f"{file}: key {key!r} must be a list of names, got {shown(key, value)}")
        return tuple(value)
    if origin in (Mapping, dict):
        if not isinstance(value, dict):
            raise ConfigError(f"{file}: key {key!r} must be a mapping of settings, got {shown(key, value)}")
        bad = {k: v for k, v in value.items() if not isinstance(v, (str, int, float, bool))}
        if bad:
            sub, val = next(iter(bad.items()))
            raise ConfigError(f"{file}: key '{key}.{sub}' must be a plain value, got {shown(sub, val)}")
        return {str(k): _scalar_text(v) for k, v in value.items()}
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{file}: key {key!r} must be true or false, got {shown(key, value)}")
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{file}: key {key!r} must be an integer, got {shown(key, value)}")
        return value
    if hint is str:
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            raise ConfigError(f"{file}: key {key!r} must be a string, got {shown(key, value)}")
        if not str(value).strip():  # an unset ${VAR}, or a value left out by mistake: not the default
            raise ConfigError(f"{file}: key {key!r} is empty: give it a value (an optional key may be left out)")
        return str(value)
    raise ConfigError(f"{file}: key {key!r} has an unsupported type {hint!r}")  # pragma: no cover


def shown(key: str, value: Any) -> str:
    """A rejected value as an error message shows it: secrets (by their key, at any depth) as '***'."""
    if _SECRET.search(key):
        return "'***'"
    if isinstance(value, dict):
        return repr({k: "***" if _SECRET.search(str(k)) else v for k, v in value.items()})
    return repr(value)


def _scalar_text(value: str | int | float | bool) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
