"""The settings of the native driver, read from glance-api's environment."""

import logging
import os

from glance_rbd_native._native import DEFAULT_MAX_IN_FLIGHT

LOG = logging.getLogger(__name__)

MAX_IN_FLIGHT_ENV = "GLANCE_RBD_NATIVE_MAX_IN_FLIGHT_MIB"


def max_in_flight():
    """Bytes allowed in flight per upload and per download: the environment's MiB setting, or
    the default."""
    value = os.environ.get(MAX_IN_FLIGHT_ENV, "").strip()
    if not value:
        return DEFAULT_MAX_IN_FLIGHT
    try:
        mib = int(value)
    except ValueError:
        mib = 0
    if mib < 1:
        LOG.warning("%s=%r is not a positive integer; using the default of %d MiB",
                    MAX_IN_FLIGHT_ENV, value, DEFAULT_MAX_IN_FLIGHT >> 20)
        return DEFAULT_MAX_IN_FLIGHT
    return mib << 20
