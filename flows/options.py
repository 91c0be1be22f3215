"""Command-line options derived from the stage configs.

A command names the config it builds and the fields it exposes; each option's name, type,
default and help come from that field (its default, its type, the docstring under it in the
config's ``config.py``). The config is built whole from what the user gave and handed to the
command's body, so its own checks are the only checks (``__post_init__``, and ``check_inputs()``
where a config names files): a bad value exits 2 with the config's message, before Prefect
starts. Nothing here knows any stage.

    @app.command()
    @configured(LabelConfig, "k", "policy", max_tokens="sampling.max_tokens")
    def label(config: LabelConfig, lake: LakeOpt = None) -> None: ...
"""

from __future__ import annotations

import functools
import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Annotated, Any

import typer

from pipeline.config_fields import (
    build_config,
    field_docs,
    field_type,
    nested_default,
    nested_field,
)


@dataclass(frozen=True)
class ConfigOption:
    """One option: ``--name`` sets the config field at ``path``."""

    name: str  # the command's parameter (``max_tokens``; the flag is ``--max-tokens``)
    path: str  # the field, dotted into nested configs (``sampling.max_tokens``)
    type: Any  # what the command line parses
    default: Any  # the config's default (inspect.Parameter.empty: required)
    help: str
    argument: bool = False  # a positional argument instead of an --option
    short: str | None = None  # a one-letter alias (-f)
    aliases: tuple[str, ...] = ()  # other flags shown first (--model for the field `policy`)

    @property
    def flag(self) -> str:
        return self.name.upper() if self.argument else "--" + self.name.replace("_", "-")


def _cli_type(tp: Any) -> tuple[Any, Callable[[Any], Any]]:
    """A type typer parses for a field's type, and how a parsed value goes back into the field:
    tuples of names become repeatable options (a list) and are given back as tuples."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    optional = origin in (typing.Union, types.UnionType) and type(None) in args
    inner = next((a for a in args if a is not type(None)), tp) if optional else tp
    if (
        typing.get_origin(inner) is tuple
        and len(args := typing.get_args(inner)) == 2
        and (args[1] is Ellipsis)
    ):
        # repeatable, and each value may be a comma-separated list: --eval-set a,b
        return (
            list[args[0]] | None,
            lambda v: (
                tuple(x.strip() for item in v for x in item.split(",") if x.strip())
                if v is not None
                else None
            ),
        )
    return tp, lambda v: v


def options_of(cls: type, fields: tuple[str, ...], renamed: dict[str, str]) -> list[ConfigOption]:
    """The options for ``fields`` (names, or dotted paths named by their last part) and
    ``renamed`` (option name -> dotted path) of the config ``cls``."""
    wanted = {path.rsplit(".", 1)[-1]: path for path in fields} | renamed
    out = []
    for name, path in wanted.items():
        owner, leaf = nested_field(cls, path)
        doc = field_docs(owner).get(leaf)
        if not doc:
            raise TypeError(
                f"{owner.__name__}.{leaf} has no docstring: the option --{name} needs one"
            )
        tp, _ = _cli_type(field_type(cls, path))
        default = nested_default(cls, path)
        if default is inspect.Parameter.empty and _optional_outer(cls, path):
            default = None  # required by a nested config that is itself optional (--judge)
        out.append(ConfigOption(name, path, tp, default, doc.replace("``", "")))
    return out


def _optional_outer(cls: type, path: str) -> bool:
    """Whether some config on the way to ``path`` defaults to None (built only when given)."""
    parts = path.split(".")
    return any(nested_default(cls, ".".join(parts[:i])) is None for i in range(1, len(parts)))


def _option(opt: ConfigOption) -> inspect.Parameter:
    default = opt.default
    shown = None
    if isinstance(default, tuple):  # a repeatable option shows the config's values
        shown = ", ".join(map(str, default)) or "none"
        default = None
    show = shown if shown is not None else True
    if opt.argument:
        info = typer.Argument(help=opt.help, show_default=show)
    else:
        flags = (*opt.aliases, opt.flag, *filter(None, [opt.short]))
        info = typer.Option(*flags, help=opt.help, show_default=show)
    annotation = Annotated[opt.type, info]
    return inspect.Parameter(
        opt.name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def _unset(opt: ConfigOption, value: Any) -> bool:
    if isinstance(opt.default, tuple) and not value:
        return True  # a repeatable option not given: the config's tuple applies
    if value is None and opt.default is None:
        return True
    return opt.default is not inspect.Parameter.empty and value == opt.default


def config_error(message: str, options: list[ConfigOption]) -> typer.BadParameter:
    """A config's refusal as the command line's error, naming the option it is about: the one
    whose field the message names first (its dotted path before its bare name)."""

    def where(o: ConfigOption) -> tuple[int, int]:
        for rank, name in enumerate((o.path, o.path.rsplit(".", 1)[-1])):
            m = re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", message)
            if m:
                return m.start(), rank
        return len(message) + 1, 2

    best = min(options, key=where, default=None)
    hint = None
    if best is not None and where(best)[0] <= len(message):
        hint = best.aliases[0] if best.aliases else best.flag  # the name help shows
    return typer.BadParameter(message, param_hint=hint)


def configured(
    cls: type,
    *fields: str,
    param: str = "config",
    required: tuple[str, ...] = (),
    arguments: tuple[str, ...] = (),
    short: dict[str, str] | None = None,
    aliases: dict[str, tuple[str, ...]] | None = None,
    resolve: Callable[..., None] | None = None,
    **renamed: str,
) -> Callable[[Callable], Callable]:
    """Replace the command's ``param`` parameter (annotated ``cls``) by one option per field;
    the body receives the config built from them. ``fields`` keep the field's own name (a dotted
    path is named by its last part); ``renamed`` gives an option its own name; ``required``
    options must be given on this command although the config has a default (a library caller
    may pass prompts instead of a dataset; the command line cannot); ``arguments`` are
    positional; ``short`` gives one-letter aliases; ``aliases`` other flags, shown first (one
    name for one thing across commands, the config's own name still accepted);
    ``resolve(values, **params)`` rewrites what the user typed before the config is built (a
    dataset's name into its folder), given the command's own parameters it names (``lake``).
    The wrapped command keeps ``.options`` and ``.make_config(values)`` (tests walk them)."""
    options = [
        replace(
            o,
            default=inspect.Parameter.empty if o.name in required else o.default,
            argument=o.name in arguments,
            short=(short or {}).get(o.name),
            aliases=(aliases or {}).get(o.name, ()),
        )
        for o in options_of(cls, fields, renamed)
    ]
    if stray := {*(short or {}), *(aliases or {})} - {o.name for o in options}:
        raise TypeError(f"aliases for options {sorted(stray)} that {cls.__name__} is not given")
    convert = {o.name: _cli_type(field_type(cls, o.path))[1] for o in options}

    def make_config(values: dict[str, Any]) -> Any:
        """The config from option values; an option left at its default is not passed, so the
        config's own default (and what it derives from it) applies."""
        given = {
            o.path: convert[o.name](values[o.name])
            for o in options
            if o.name in values and not _unset(o, values[o.name])
        }
        try:
            config = build_config(cls, given)
            if hasattr(config, "check_inputs"):  # the files it names exist (before Prefect starts)
                config.check_inputs()
            return config
        except ValueError as e:
            raise config_error(str(e), options) from None

    def decorate(fn: Callable) -> Callable:
        sig = inspect.signature(fn)
        if param not in sig.parameters:
            raise TypeError(f"{fn.__name__} has no parameter {param!r} to receive {cls.__name__}")
        hints = typing.get_type_hints(fn, include_extras=True)  # typer reads Annotated[...]
        kept = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in sig.parameters.values()
            if p.name != param
        ]
        clash = {o.name for o in options} & {p.name for p in kept}
        if clash:
            raise TypeError(f"{fn.__name__}: options {sorted(clash)} are declared twice")
        reads = list(inspect.signature(resolve).parameters)[1:] if resolve else []
        if missing := set(reads) - set(sig.parameters):
            raise TypeError(f"{fn.__name__} has no parameters {sorted(missing)} for resolve")
        added = [_option(o) for o in options]
        ordered = [p for p in kept if p.default is inspect.Parameter.empty] + added
        ordered += [p for p in kept if p.default is not inspect.Parameter.empty]
        ordered = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in ordered]

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            values = {o.name: kwargs.pop(o.name) for o in options if o.name in kwargs}
            if resolve is not None:
                resolve(values, **{p: kwargs[p] for p in reads})
            return fn(**kwargs, **{param: make_config(values)})

        command.__signature__ = sig.replace(parameters=ordered)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in ordered}
        del command.__wrapped__  # typer reads the signature above, not the body's
        command.options = [*getattr(fn, "options", []), *options]  # type: ignore[attr-defined]
        command.make_config = make_config  # type: ignore[attr-defined]
        command.configs = {**getattr(fn, "configs", {}), param: (cls, make_config)}  # type: ignore[attr-defined]
        command.body = getattr(fn, "body", fn)  # type: ignore[attr-defined]
        command.resolved_with = {*getattr(fn, "resolved_with", ()), *reads}  # type: ignore[attr-defined]
        return command

    return decorate
