"""Sizes and durations as operators read them, in the command's output and in glance's log."""

from typing import Optional


def size(count: Optional[float]) -> str:
    """512 bytes, 4.0 KiB, 1.5 MiB, 2.1 GiB, 3.2 TiB; "?" when not known."""
    if count is None:
        return "?"
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift:
            return f"{count / (1 << shift):.1f} {unit}"
    return f"{int(count)} bytes"


def duration(seconds: Optional[float]) -> str:
    """45 s (under two minutes), 4m05s, 2h07m, 3d04h; "?" when not known."""
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 120:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"
