"""Command-line flags generated from config parts, and back: flags from a config.

A field ``some_name`` becomes ``--some-name`` with the field's type, default, choices
and help. A boolean field is a switch: ``--X`` when it defaults to False, ``--no-X``
when it defaults to True. With ``given_only`` a flag that is not given leaves no value in
the parsed namespace, so the caller knows which settings were given (the presets fill in
the rest); the help text then names the default. Options declared ``common`` are listed by
``--help``; :func:`add_help_all` adds ``--help-all``, which lists every flag.
"""
from __future__ import annotations

import argparse
import typing
from dataclasses import fields

from .options import option_of


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def switch_name(name: str, default: bool) -> str:
    """``--X`` for a switch that is off by default, ``--no-X`` for one that is on."""
    return "--no-" + name.replace("_", "-") if default else flag_name(name)


def cli_fields(part_type: type) -> list:
    """``(field, option, value type)`` of every field of ``part_type`` that has a flag."""
    hints = typing.get_type_hints(part_type)
    out = []
    for f in fields(part_type):
        opt = option_of(f)
        if opt is not None and opt.cli:
            out.append((f, opt, _value_type(hints[f.name])))
    return out


def _value_type(hint) -> type:
    """``int`` for ``int`` and ``int | None``, and so on."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def add_part_arguments(parser, defaults, *, exclude=(), required=(), given_only: bool = False,
                       shown_defaults: dict | None = None) -> None:
    """Add a flag for every field of the part ``defaults`` is an instance of.

    ``exclude``: fields left out; ``required``: fields whose flag must be given;
    ``given_only``: a flag not given sets nothing (see the module docstring); its help names
    the default, or ``shown_defaults[name]`` where a preset decides it.
    """
    for f, opt, kind in cli_fields(type(defaults)):
        if f.name in exclude:
            continue
        default = getattr(defaults, f.name)
        text = argparse.SUPPRESS if opt.hidden else opt.help
        if given_only and not opt.hidden:
            shown = (shown_defaults or {}).get(f.name, default)
            if kind is not bool and shown is not None and shown != "":
                text = f"{text} (default: {shown})".replace("%", "%%")
        full = text
        if given_only and not opt.common and not opt.hidden:
            text = argparse.SUPPRESS  # listed by --help-all only
        if kind is bool:
            action = "store_false" if default else "store_true"
            kwargs = dict(default=argparse.SUPPRESS) if given_only else {}
            added = parser.add_argument(switch_name(f.name, default), dest=f.name, action=action, help=text,
                                        **kwargs)
            added.full_help = full
            continue
        kwargs = dict(dest=f.name, help=text)
        if kind in (int, float):
            kwargs["type"] = kind
        if opt.choices is not None:
            kwargs["choices"] = opt.choices
        if f.name in required:
            kwargs["required"] = True
        else:
            kwargs["default"] = argparse.SUPPRESS if given_only else default
        parser.add_argument(flag_name(f.name), **kwargs).full_help = full


class _HelpAll(argparse.Action):
    """``--help-all``: the help with every flag, then exit."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        for action in parser._actions:
            action.help = getattr(action, "full_help", action.help)
        parser.print_help()
        parser.exit()


def add_help_all(parser) -> None:
    """``--help-all`` on ``parser`` (``--help`` lists the common flags only)."""
    parser.add_argument("--help-all", action=_HelpAll, help="show every flag and exit")


def part_values(part) -> dict:
    """The part's fields that have a flag, by name."""
    return {f.name: getattr(part, f.name) for f, _opt, _kind in cli_fields(type(part))}


def part_from_args(part_type: type, ns: argparse.Namespace):
    """An instance of ``part_type`` from parsed flags (fields without a flag keep their default)."""
    return part_type(**{f.name: getattr(ns, f.name) for f, _opt, _kind in cli_fields(part_type)})

