"""One method of one object replaced on the instance (its class stays DGL's).

:class:`InstanceMethod` holds what ``kvclient_pull`` and ``kvclient_push`` each change on
the trainer's KVClient: install binds the replacement in the instance's ``__dict__``
(idempotent for the same object and function), uninstall restores exactly what was there.
"""
from ._dgl_version import WRITTEN_FOR, check

_ABSENT = object()  # the instance had no own attribute of that name (DGL's case)


class InstanceMethod:
    """The replacement of ``obj.<name>`` made by one patch module (``patch``)."""

    def __init__(self, patch: str, name: str):
        self.patch, self.name = patch, name
        self.obj, self.saved, self.func = None, _ABSENT, None

    def install(self, obj, func) -> None:
        import dgl
        check(self.patch, dgl.__version__, WRITTEN_FOR)
        if self.obj is not None:
            if obj is self.obj and func == self.func:
                return
            raise RuntimeError(f"patch {self.patch!r} is installed on another client or with another "
                               f"{self.name}; uninstall() first")
        self.obj, self.saved, self.func = obj, vars(obj).get(self.name, _ABSENT), func
        setattr(obj, self.name, func)

    def uninstall(self) -> None:
        if self.obj is None:
            return
        if self.saved is _ABSENT:
            delattr(self.obj, self.name)
        else:
            setattr(self.obj, self.name, self.saved)
        self.obj, self.saved, self.func = None, _ABSENT, None

    def is_installed(self) -> bool:
        return self.obj is not None
