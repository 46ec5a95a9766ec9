"""The DGL version check every patch runs before it changes anything.

Each patch replaces an object inside DGL that is not a stable interface, so it names
the DGL release series it was written for; :func:`check` (called by each patch's
``install``) refuses any other DGL with a message naming the patch, the version found
and the versions expected.
"""

WRITTEN_FOR = ("2.1",)  # DGL release series (major.minor) the patches were written for


class UnsupportedDGLVersion(RuntimeError):
    """A patch was asked to install on a DGL it was not written for."""


def check(patch: str, found: str, expected: tuple = WRITTEN_FOR) -> None:
    """Raise :class:`UnsupportedDGLVersion` unless ``found`` is in one of the ``expected`` series."""
    series = ".".join(str(found).split(".")[:2])
    if series not in expected:
        wanted = ", ".join(f"{s}.x" for s in expected)
        raise UnsupportedDGLVersion(
            f"patch {patch!r} was written for DGL {wanted}, but DGL {found} is installed; "
            f"use DGL {wanted} or update the patch")
