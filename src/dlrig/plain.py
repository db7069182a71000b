"""Generic (de)serialisation of frozen dataclasses to plain JSON values and back.

Kept apart from the snapshot's fields so the model reads as a schema, and below every command
so each of their reports has a typed reader (`from_dict`) built on it. `from_plain` checks types
and names the first field that does not fit (``machine.gpus[0].name: expected str``), which is
what `--from` errors quote to the user.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from typing import Any, Literal, TypeVar, Union

T = TypeVar("T")


def word(words: tuple[T, ...], value: object, where: str) -> T:
    """`value` as the one of `words` (a Literal's, `typing.get_args`) it equals, so the Literal
    type holds where a str came in (a click choice, a JSON field); else ValueError."""
    for candidate in words:
        if candidate == value:
            return candidate
    raise ValueError(f"{where}: {value!r} is not one of {', '.join(map(str, words))}")


def to_plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [to_plain(item) for item in value]
    if isinstance(value, dict):
        return {key: to_plain(item) for key, item in value.items()}
    return value


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS_CACHE:
        _HINTS_CACHE[cls] = typing.get_type_hints(cls)
    return _HINTS_CACHE[cls]


def from_plain(tp: Any, value: Any, where: str, strict: bool = True) -> Any:
    """`value` (plain JSON) as `tp`; `strict=False` drops object keys `tp` has no field for
    (a document written by a newer dlrig), where strict names the first one."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ValueError(f"{where}: null is not allowed")
        non_none = [arg for arg in args if arg is not type(None)]
        errors = []
        for arg in non_none:
            try:
                return from_plain(arg, value, where, strict)
            except ValueError as exc:
                errors.append(str(exc))
        raise ValueError(errors[0])
    if origin is tuple:
        # a tuple where `dataclasses.asdict` left one (an in-process document, not JSON)
        if not isinstance(value, list | tuple):
            raise ValueError(f"{where}: expected a list, got {type(value).__name__}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(
                from_plain(args[0], item, f"{where}[{i}]", strict) for i, item in enumerate(value)
            )
        if len(args) != len(value):
            raise ValueError(f"{where}: expected {len(args)} items, got {len(value)}")
        return tuple(
            from_plain(a, v, f"{where}[{i}]", strict)
            for i, (a, v) in enumerate(zip(args, value, strict=True))
        )
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        hints = _hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - known)
        if unknown and strict:
            raise ValueError(f"{where}: unknown field {unknown[0]!r}")
        kwargs = {
            name: from_plain(hints[name], item, f"{where}.{name}", strict)
            for name, item in value.items()
            if name in known
        }
        try:
            return tp(**kwargs)
        except TypeError as exc:
            raise ValueError(f"{where}: {exc}") from None
    if tp is Any:
        return value
    if origin is Literal:
        if value not in typing.get_args(tp):
            choices = ", ".join(repr(choice) for choice in typing.get_args(tp))
            raise ValueError(f"{where}: {value!r} is not one of {choices}")
        return value
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            choices = ", ".join(str(member.value) for member in tp)
            raise ValueError(f"{where}: {value!r} is not one of {choices}") from None
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where}: expected an object, got {type(value).__name__}")
        key_type, item_type = typing.get_args(tp) or (str, Any)
        return {
            from_plain(key_type, k, where, strict): from_plain(item_type, v, f"{where}.{k}", strict)
            for k, v in value.items()
        }
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: expected a number, got {value!r}")
        return float(value)
    if tp in (int, str, bool):
        if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
            raise ValueError(f"{where}: expected {tp.__name__}, got {value!r}")
        return value
    raise ValueError(f"{where}: unsupported type {tp!r}")
