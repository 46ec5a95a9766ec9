"""Command-line flags generated from config parts, and back: flags from a config.

A field ``some_name`` becomes ``--some-name`` with the field's type, default, choices
and help. A boolean field is a switch: ``--X`` when it defaults to False, ``--no-X``
when it defaults to True. Defaults come from an instance of the part, so an owner can
use other defaults than the part's class (``dgl-sni train`` syncs every epoch).
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
        if opt.cli:
            out.append((f, opt, _value_type(hints[f.name])))
    return out


def _value_type(hint) -> type:
    """``int`` for ``int`` and ``int | None``, and so on."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def add_part_arguments(parser, defaults, *, exclude=(), required=()) -> None:
    """Add a flag for every field of the part ``defaults`` is an instance of.

    ``exclude``: fields left out; ``required``: fields whose flag must be given.
    """
    for f, opt, kind in cli_fields(type(defaults)):
        if f.name in exclude:
            continue
        default = getattr(defaults, f.name)
        text = argparse.SUPPRESS if opt.hidden else opt.help
        if kind is bool:
            action = "store_false" if default else "store_true"
            parser.add_argument(switch_name(f.name, default), dest=f.name, action=action, help=text)
            continue
        kwargs = dict(dest=f.name, help=text)
        if kind in (int, float):
            kwargs["type"] = kind
        if opt.choices is not None:
            kwargs["choices"] = opt.choices
        if f.name in required:
            kwargs["required"] = True
        else:
            kwargs["default"] = default
        parser.add_argument(flag_name(f.name), **kwargs)


def part_argv(part, defaults) -> list:
    """Flags that make :func:`add_part_arguments` (with ``defaults``) parse back to ``part``."""
    argv = []
    for f, _opt, kind in cli_fields(type(part)):
        value = getattr(part, f.name)
        if kind is bool:
            default = getattr(defaults, f.name)
            if value != default:
                argv.append(switch_name(f.name, default))
        elif value is not None:
            argv += [flag_name(f.name), str(value)]
    return argv


def part_values(part) -> dict:
    """The part's fields that have a flag, by name."""
    return {f.name: getattr(part, f.name) for f, _opt, _kind in cli_fields(type(part))}


def part_from_args(part_type: type, ns: argparse.Namespace):
    """An instance of ``part_type`` from parsed flags (fields without a flag keep their default)."""
    return part_type(**{f.name: getattr(ns, f.name) for f, _opt, _kind in cli_fields(part_type)})

