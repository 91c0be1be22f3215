"""What a stage config's fields say about themselves: the docstring under each field, its
default, and a copy of a config with a nested field changed. The ``flow`` command line derives
its options from these, so a config's defaults and help are written once, in its config.py."""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
from typing import Any


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """``{field: docstring}`` of a dataclass: the string literal written right under each field
    (the convention of PEP 257's attribute docstrings, read by Sphinx and tyro), one line."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            source = textwrap.dedent(inspect.getsource(klass))
        except (OSError, TypeError):  # defined where there is no source (an interpreter)
            continue
        (node,) = ast.parse(source).body
        body = node.body
        for st, nxt in zip(body, body[1:], strict=False):
            if (
                isinstance(st, ast.AnnAssign)
                and isinstance(st.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[st.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
    return docs


def field_default(cls: type, name: str) -> Any:
    """A field's default value (its factory called), or ``inspect.Parameter.empty`` when the
    field is required."""
    f = {f.name: f for f in dataclasses.fields(cls)}[name]
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return inspect.Parameter.empty


def nested_default(cls: type, path: str) -> Any:
    """The default of a dotted field path (``"sampling.max_tokens"``): the outer field's default
    object, then attribute by attribute (an outer default may differ from the inner class's own
    default, as BuildConfig's select does); under an outer default of None, the inner class's
    own default."""
    head, *rest = path.split(".")
    value = field_default(cls, head)
    owner = cls
    for name in rest:
        inner = _dataclass_of(_hints(owner)[head])
        value = field_default(inner, name) if value is None else getattr(value, name)
        owner, head = inner, name
    return value


def nested_field(cls: type, path: str) -> tuple[type, str]:
    """The dataclass that declares the last name of a dotted path, and that name."""
    *outer, name = path.split(".")
    for part in outer:
        hints = _hints(cls)
        cls = _dataclass_of(hints[part])
    return cls, name


def _hints(cls: type) -> dict[str, Any]:
    import typing

    return typing.get_type_hints(cls)


def _dataclass_of(tp: Any) -> type:
    """The dataclass in a field's type (``Sampling``, ``SelectConfig | None``)."""
    import types
    import typing

    if dataclasses.is_dataclass(tp):
        return tp
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if dataclasses.is_dataclass(arg):
                return arg
    raise TypeError(f"{tp} is not a dataclass field")


def field_type(cls: type, path: str) -> Any:
    """The resolved type of a dotted field path."""
    owner, name = nested_field(cls, path)
    return _hints(owner)[name]


def with_values(base: Any, values: dict[str, Any]) -> Any:
    """A copy of the dataclass ``base`` with dotted paths set (``{"select.size": 100}``); nested
    configs are rebuilt with ``dataclasses.replace``, so each one's own checks run again."""
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            own[head] = value
    for head, inner in nested.items():
        own[head] = with_values(own.get(head, getattr(base, head)), inner)
    return dataclasses.replace(base, **own) if own else base


def build_config(cls: type, values: dict[str, Any]) -> Any:
    """``cls(**values)`` where ``values`` may hold dotted paths into nested configs; a nested
    config starts from the outer field's default (or the nested class's own defaults)."""
    own: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for path, value in values.items():
        head, _, rest = path.partition(".")
        if rest:
            nested.setdefault(head, {})[rest] = value
        else:
            own[head] = value
    for head, inner in nested.items():
        base = own.get(head)
        if base is None:
            base = field_default(cls, head)
        if base is None or base is inspect.Parameter.empty:
            inner_cls = _dataclass_of(_hints(cls)[head])
            try:
                own[head] = build_config(inner_cls, inner)
            except TypeError as e:  # a required field of the nested config is missing
                missing = [
                    f.name
                    for f in dataclasses.fields(inner_cls)
                    if field_default(inner_cls, f.name) is inspect.Parameter.empty
                    and f.name not in inner
                ]
                given = ", ".join(f"{head}.{k}" for k in inner)
                raise ValueError(
                    f"{given} given without {', '.join(f'{head}.{m}' for m in missing)}"
                ) from e
            continue
        own[head] = with_values(base, inner)
    return cls(**own)
