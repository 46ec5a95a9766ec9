"""RPC messages declared by their fields.

DGL's RPC sends a request or response as its ``__getstate__``: a tuple whose tensors
travel as they are and whose other items are pickled; the receiver rebuilds the object
with ``__new__`` and ``__setstate__`` (a one-item state arrives unwrapped). A message
class of this project is a dataclass that also derives from :class:`FieldState`; its
state is its fields, in declaration order, so a field is declared once::

    @dataclass(eq=False)
    class PullSetRequest(FieldState, rpc.Request):
        name: str
        rank: int
        after: int = 0

Used by the id-set services (:mod:`dgl_sni.halo.id_sets`) and the notice board
(:mod:`dgl_sni.sni.notices`).
"""
from __future__ import annotations

from dataclasses import fields
from functools import lru_cache


@lru_cache(maxsize=None)
def _names(cls) -> tuple:
    return tuple(f.name for f in fields(cls))


class FieldState:
    """Mixin for a dataclass message: ``__getstate__``/``__setstate__`` from its fields.

    A message with one field sends that value alone (not a tuple), as DGL hands it back;
    with none, an empty tuple.
    """

    def __getstate__(self):
        names = _names(type(self))
        if len(names) == 1:
            value = getattr(self, names[0])
            if isinstance(value, tuple):  # DGL would send its items as the fields
                raise TypeError(f"{type(self).__name__}.{names[0]}: a one-field message cannot carry a tuple")
            return value
        return tuple(getattr(self, name) for name in names)

    def __setstate__(self, state):
        names = _names(type(self))
        if len(names) == 1:
            state = (state,)
        if len(state) != len(names):
            raise ValueError(f"{type(self).__name__} takes {len(names)} fields ({', '.join(names)}), "
                             f"got a state of {len(state)}")
        for name, value in zip(names, state):
            setattr(self, name, value)
