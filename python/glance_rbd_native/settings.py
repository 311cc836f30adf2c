"""The settings of the native driver: the ``[glance_rbd_native]`` section of glance-api's
configuration, and the environment variable that overrides it."""

import logging
import os
from typing import Optional, cast

from oslo_config import cfg

from glance_rbd_native import progress
from glance_rbd_native._native import DEFAULT_MAX_IN_FLIGHT, set_max_in_flight

LOG = logging.getLogger(__name__)

MAX_IN_FLIGHT_ENV = "GLANCE_RBD_NATIVE_MAX_IN_FLIGHT_MIB"
PROGRESS_INTERVAL_ENV = "GLANCE_RBD_NATIVE_PROGRESS_INTERVAL"
STALL_THRESHOLD_ENV = "GLANCE_RBD_NATIVE_STALL_THRESHOLD"


def _group() -> cfg.OptGroup:
    return cfg.OptGroup(
        "glance_rbd_native",
        title="glance-rbd-native",
        help="The native RBD writer and reader of glance-rbd-native. The switch that turns them "
        "on, GLANCE_RBD_NATIVE=1, is an environment variable only: it acts when "
        "glance_store's rbd driver is imported, before glance reads this file.",
    )


GROUP = _group()

OPTS: list[cfg.Opt] = [
    cfg.IntOpt(
        "max_in_flight_mib",
        default=DEFAULT_MAX_IN_FLIGHT >> 20,
        min=1,
        help="MiB that all uploads and downloads of one glance-api process may hold at once: "
        "writes in flight to the cluster and chunks held for hashing, reads ahead of the "
        "consumer. Shared evenly by the transfers running; each always has at least one "
        "chunk in flight. The environment variable "
        f"{MAX_IN_FLIGHT_ENV}, when set, overrides it.",
    ),
    cfg.IntOpt(
        "progress_interval",
        default=progress.DEFAULT_INTERVAL,
        min=0,
        help="Seconds between the INFO lines that give the bytes so far, time and rate of each "
        "upload and download running longer than that; 0 turns them off. The environment "
        f"variable {PROGRESS_INTERVAL_ENV}, when set, overrides it.",
    ),
    cfg.IntOpt(
        "stall_threshold",
        default=progress.DEFAULT_STALL_THRESHOLD,
        min=0,
        help="Seconds an upload or download may go without progress before a WARNING says "
        "what it waits on: glance's image data, the cluster, its share of the in-flight "
        "bound, or the consumer of a download. Once per stall, and an INFO line when it "
        "moves again; 0 turns the warnings off. The environment variable "
        f"{STALL_THRESHOLD_ENV}, when set, overrides it.",
    ),
    cfg.IntOpt(
        "presume_gone_after",
        default=3600,
        min=60,
        help="Seconds after which the writer of a partial image is presumed gone when it cannot "
        "be seen from the host that looks (another host, another container's pid "
        "namespace) and has had neither a watch on its image nor a refresh of its mark for "
        "that long. It is then fenced (its client blocklisted) before the image is "
        "removed, by `glance-rbd-native sweep --remove` or by an upload of the same image "
        "id. A writer whose process can be seen is never presumed gone.",
    ),
]

# The environment variables over the options: each with the least value it takes, and what
# its warning says a value must be.
_OVERRIDES = {
    "max_in_flight_mib": (MAX_IN_FLIGHT_ENV, 1, "a positive integer"),
    "progress_interval": (PROGRESS_INTERVAL_ENV, 0, "a number of seconds (0 or more)"),
    "stall_threshold": (STALL_THRESHOLD_ENV, 0, "a number of seconds (0 or more)"),
}
# The unit of an option's value, as the warnings name it: seconds, but for the bound.
_UNITS = {"max_in_flight_mib": "MiB"}

# The bound last logged, with where it came from: logged again only when it changes.
_logged: Optional[tuple[int, str]] = None


def list_opts() -> list[tuple[cfg.OptGroup, list[cfg.Opt]]]:
    """The options, for oslo-config-generator (the ``oslo.config.opts`` entry point)."""
    return [(GROUP, OPTS)]


def register_opts(conf: cfg.ConfigOpts) -> None:
    """Registers the section on ``conf``. Safe to call again."""
    # A group object of its own for each configuration: oslo.config copies a group it registers
    # only shallowly, so an override set on one configuration would show in all the others.
    conf.register_group(_group())
    conf.register_opts(OPTS, group=GROUP.name)


def apply(conf: Optional[cfg.ConfigOpts] = None) -> None:
    """Sets the process's in-flight bound and the progress reports from the settings; called
    at every transfer, so that a configuration parsed (or reloaded) after the patch is
    honoured."""
    set_max_in_flight(max_in_flight(conf))
    progress.configure(progress_interval(conf), stall_threshold(conf))


def max_in_flight(conf: Optional[cfg.ConfigOpts] = None) -> int:
    """Bytes the transfers of the process may hold at once: the environment's MiB setting, else
    ``max_in_flight_mib`` of ``conf`` (glance's configuration; None: the option's default)."""
    mib, source = _overridden(conf, "max_in_flight_mib")
    _log_bound(mib, source)
    return mib << 20


def progress_interval(conf: Optional[cfg.ConfigOpts] = None) -> int:
    """Seconds between the progress lines of a transfer (0: none): the environment's setting,
    else ``progress_interval`` of ``conf``."""
    return _overridden(conf, "progress_interval")[0]


def stall_threshold(conf: Optional[cfg.ConfigOpts] = None) -> int:
    """Seconds without progress before a transfer's warning (0: none): the environment's
    setting, else ``stall_threshold`` of ``conf``."""
    return _overridden(conf, "stall_threshold")[0]


def presume_gone_after(conf: Optional[cfg.ConfigOpts] = None) -> int:
    """Seconds of silence after which an unseen writer is presumed gone (``leftovers``)."""
    return _option(conf, "presume_gone_after")


def _overridden(conf: Optional[cfg.ConfigOpts], name: str) -> tuple[int, str]:
    """Option ``name``: its environment variable when that holds a valid value, else the option
    of ``conf`` (with a warning if the variable holds another); and which of the two, as the log
    names it."""
    env, least, valid = _OVERRIDES[name]
    value = os.environ.get(env, "").strip()
    if value:
        try:
            number = int(value)
        except ValueError:
            number = least - 1
        if number >= least:
            return number, env
    number = _option(conf, name)
    option = f"[{GROUP.name}] {name}"
    if value:
        LOG.warning(
            "%s=%r is not %s; using %s, %d %s",
            env,
            value,
            valid,
            option,
            number,
            _UNITS.get(name, "s"),
        )
    return number, option


def _option(conf: Optional[cfg.ConfigOpts], name: str) -> int:
    """Option ``name`` of ``conf``, registering the section on it first: its default without a
    configuration, or when the file's value is invalid (logged). Read per call, so that a
    configuration parsed after the patch is honoured."""
    default: int = next(opt.default for opt in OPTS if opt.name == name)
    if conf is None:
        return default
    _register_once(conf, name)
    try:
        return cast(int, conf[GROUP.name][name])
    except ValueError as exc:  # not an integer, or below the minimum, in the file
        LOG.warning(
            "[%s] %s: %s; using the default, %d %s",
            GROUP.name,
            name,
            exc,
            default,
            _UNITS.get(name, "s"),
        )
        return default


def _register_once(conf: cfg.ConfigOpts, name: str) -> None:
    # Registered once per ConfigOpts: registering again would clear its cache of values.
    if GROUP.name not in conf or name not in conf[GROUP.name]:
        register_opts(conf)


def _log_bound(mib: int, source: str) -> None:
    """Logs the bound the transfers get, at the first and whenever it changes: at patch time
    glance may not have read its configuration yet."""
    global _logged
    if _logged != (mib, source):
        _logged = (mib, source)
        LOG.info(
            "glance-rbd-native: %d MiB in flight, shared by all uploads and downloads of "
            "this process (%s)",
            mib,
            source,
        )
