"""Sizes and durations as the command prints them and glance's log shows them
(glance_rbd_native.units), no cluster."""

import pytest

from glance_rbd_native.units import duration, size


@pytest.mark.parametrize(
    "count,shown",
    [
        (None, "?"),
        (0, "0 bytes"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (3 << 19, "1.5 MiB"),
        (8 << 30, "8.0 GiB"),
        (3 << 40, "3.0 TiB"),
    ],
)
def test_sizes(count, shown):
    assert size(count) == shown


@pytest.mark.parametrize(
    "seconds,shown",
    [
        (None, "?"),
        (0.7, "0 s"),
        (119, "119 s"),
        (120, "2m00s"),
        (245, "4m05s"),
        (3600, "1h00m"),
        (7620, "2h07m"),
        (273600, "3d04h"),
    ],
)
def test_durations(seconds, shown):
    assert duration(seconds) == shown
