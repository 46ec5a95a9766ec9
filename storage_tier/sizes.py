"""Byte sizes written the way people write them (``512M``, ``2G``, ``1.5GiB``).

:func:`parse_bytes` is called by the tier's own settings (:class:`storage_tier.shard.TierStorage`'s
cache budget) and by the command line's size flags.
"""
from __future__ import annotations

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40,
          "tib": 1 << 40}


def parse_bytes(text, flag: str = "size") -> int:
    """``"512M"``, ``"2G"``, ``"1.5GiB"`` or a plain number of bytes -> bytes (binary units)."""
    value = str(text).strip().lower()
    number = value.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = value[len(number):]
    try:
        if unit not in _UNITS:
            raise ValueError
        return int(float(number) * _UNITS[unit])
    except ValueError:
        raise ValueError(f"{flag} '{text}' is not a size: use e.g. 512M, 2G or a number of bytes") from None


__all__ = ["parse_bytes"]
