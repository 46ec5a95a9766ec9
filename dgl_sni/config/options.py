"""A setting declared once: its default, help text and command-line form, in ``field(metadata=...)``.

Every field of a config part is declared with :func:`option`; the flags
(:mod:`.flags`), the metrics JSON and the sweep files all read the declaration.
"""
from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field


@dataclass(frozen=True)
class Option:
    """How one config field appears outside Python.

    ``help``: the flag's help text; ``choices``: the values the flag accepts (None: any);
    ``sweep``: a ``--sweep`` run may change it; ``hidden``: the flag exists but is left out
    of ``--help`` and ``--help-all``; ``cli``: the field has a flag at all (False for
    settings only the stock-script switch reads from its JSON file); ``common``: listed by
    the short ``--help`` (every flag is listed by ``--help-all``); ``needs``: ``(what,
    applies)``, where the setting means something only when ``applies(part)`` holds on its
    part, ``what`` naming that condition: given another value there, it is refused.
    """

    help: str
    choices: tuple | None = None
    sweep: bool = False
    hidden: bool = False
    cli: bool = True
    common: bool = False
    needs: tuple | None = None


def option(default=MISSING, help: str = "", *, default_factory=MISSING, choices=None,
           sweep: bool = False, hidden: bool = False, cli: bool = True, common: bool = False,
           needs: tuple | None = None):
    """A dataclass field carrying its :class:`Option` (``field(metadata={"option": ...})``)."""
    if not help:
        raise TypeError("every config option needs its help text")
    meta = {"option": Option(help, tuple(choices) if choices is not None else None, sweep, hidden, cli,
                             common, needs)}
    if default_factory is not MISSING:
        return field(default_factory=default_factory, metadata=meta)
    return field(default=default, metadata=meta)


def option_of(f: Field) -> Option | None:
    """The :class:`Option` a field was declared with (``None``: not a setting)."""
    return f.metadata["option"]


def read_json(path: str, what: str):
    """The JSON value in ``path``; a ``ValueError`` names ``what`` the file is for and the problem."""
    import json
    try:
        with open(path) as fh:
            return json.load(fh)
    except FileNotFoundError:
        raise ValueError(f"{what} file not found: {path}") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{what} file {path} is not valid JSON: {err}") from None


def misplaced(part, given) -> None:
    """Refuse, naming why, a setting in ``given`` (names given explicitly) whose value
    differs from its default where it means nothing in ``part`` (its option's ``needs``)."""
    from dataclasses import fields
    for f in fields(part):
        opt = f.metadata.get("option")
        if opt is None or opt.needs is None or f.name not in given:
            continue
        what, applies = opt.needs
        default = f.default if f.default is not MISSING else f.default_factory()
        if getattr(part, f.name) != default and not applies(part):
            flag = "--" + f.name.replace("_", "-")
            raise ValueError(f"{flag} {getattr(part, f.name)} means nothing without {what}")
