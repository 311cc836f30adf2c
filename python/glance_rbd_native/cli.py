"""``glance-rbd-native`` (also ``python -m glance_rbd_native``): the uploads in flight in
glance's rbd backends, and the partial images of those whose writer is gone.

    glance-rbd-native --config-file /etc/glance/glance-api.conf status
    glance-rbd-native --config-file /etc/glance/glance-api.conf sweep [--remove]
    glance-rbd-native ... sweep --include-unmarked --older-than 1d [--remove]

It reads glance-api's configuration as glance-manage does, and looks at every rbd backend of
``enabled_backends`` (or the ``[glance_store]`` one), or at ``--backend NAME``. ``sweep`` changes
nothing without ``--remove``. Exit status: 0 when it ran, 1 when a cluster could not be read,
2 for a bad command line or configuration. The rules are in ``leftovers``.
"""

import argparse
import json
import logging
import re
import sys
import time
import warnings

from glance_rbd_native import compat, leftovers

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class Failure(Exception):
    """A message for the operator, and the exit status that goes with it."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


def main(argv=None):
    args = _parser().parse_args(argv)
    # glance_store's deprecation notices and its drivers that cannot load (cinder without
    # os-brick) are for glance-api's log, not for this command's output.
    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.CRITICAL, format="%(name)s: %(message)s")
    try:
        results = [_run(args, backend) for backend in _backends(args.config_file, args.backend)]
    except Failure as failure:
        print(f"glance-rbd-native: {failure}", file=sys.stderr)
        return failure.status
    if args.format == "json":
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            _print(args, result)
    return 0


def _parser():
    parser = argparse.ArgumentParser(
        prog="glance-rbd-native",
        description="Uploads in flight in glance's rbd backends, and the partial images whose "
                    "writer is gone.")
    parser.add_argument("--config-file", action="append", default=[], metavar="PATH",
                        help="glance-api's configuration; repeat for more files, read in order "
                             "(default: oslo.config's search, as glance-manage)")
    parser.add_argument("--backend", metavar="NAME",
                        help="only this backend of enabled_backends (default: every rbd one)")
    commands = parser.add_subparsers(dest="command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--format", choices=("text", "json"), default="text")
    commands.add_parser(
        "status", parents=[common],
        help="every upload in flight: host, pid, age, bytes, rate, and whether its writer lives")
    sweep = commands.add_parser(
        "sweep", parents=[common],
        help="the partial images whose writer is provably gone; --remove removes them")
    sweep.add_argument("--remove", action="store_true", help="remove what is listed")
    sweep.add_argument("--include-unmarked", action="store_true",
                       help="also list partial images without a native mark (stock's, another "
                            "tool's) and no watcher; needs --older-than; lists the whole pool")
    sweep.add_argument("--older-than", type=_age, metavar="AGE",
                       help="with --include-unmarked: created at least this long ago, e.g. "
                            "3600, 30m, 12h, 2d")
    return parser


def _age(text):
    match = re.fullmatch(r"(\d+)([smhd]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age such as 3600, 30m, 12h or 2d")
    return int(match.group(1)) * UNITS[match.group(2) or "s"]


class Backend:
    """One rbd backend of glance's configuration, as its Store reads it."""

    def __init__(self, name, store):
        self.name = name
        self.pool = store.pool
        self.conffile = store.conf_file or None
        self.user = compat.store_options(store).rbd_store_user or None
        self.timeout = compat.connect_timeout(store)


def _backends(config_files, only):
    from glance_store import exceptions
    from glance_store._drivers import rbd
    from oslo_config import cfg

    conf = cfg.ConfigOpts()
    conf.register_opt(cfg.DictOpt("enabled_backends"))
    try:
        conf(args=[f"--config-file={path}" for path in config_files], project="glance",
             prog="glance-api")
    except cfg.Error as exc:
        raise Failure(f"cannot read the configuration: {exc}", 2) from exc
    if conf.enabled_backends:
        import glance_store.multi_backend

        glance_store.multi_backend.register_store_opts(conf)
        names = [name for name, kind in conf.enabled_backends.items() if kind == "rbd"]
    else:
        import glance_store

        glance_store.register_opts(conf)
        names = ["glance_store"] if "rbd" in _single_store_types(conf) else []
    if only:
        if only not in names:
            raise Failure(f"no rbd backend {only!r} in the configuration (rbd backends: "
                          f"{', '.join(names) or 'none'})", 2)
        names = [only]
    if not names:
        raise Failure("the configuration has no rbd backend (enabled_backends, or "
                      "[glance_store] stores)", 2)
    backends = []
    for name in names:
        try:
            store = rbd.Store(conf, backend=None if name == "glance_store" else name)
            store.configure_add()
        except (exceptions.BadStoreConfiguration, cfg.Error) as exc:
            raise Failure(f"backend {name}: {exc}", 2) from exc
        backends.append(Backend(name, store))
    return backends


def _single_store_types(conf):
    options = conf.glance_store
    return set(options.stores or ()) | {options.default_store}


def _run(args, backend):
    import rados
    import rbd

    from glance_rbd_native import _native

    try:
        cluster = leftovers.connect(backend.conffile, backend.user, backend.timeout)
    except rados.Error as exc:
        errno = getattr(exc, "errno", None)
        if errno is None:
            raise Failure(f"backend {backend.name}: cannot connect to the Ceph cluster (conf "
                          f"{backend.conffile or 'default'}, user {backend.user or 'default'}): "
                          f"{exc}") from exc
        # The native driver's words for it, with what the keyring holds.
        why = _native._connect_failure(errno, conffile=backend.conffile, user=backend.user)
        raise Failure(f"backend {backend.name}: {why}") from exc
    entity = f"client.{backend.user or 'admin'}"
    try:
        with cluster.open_ioctx(backend.pool) as ioctx:
            return _look(args, backend, cluster, ioctx)
    except rados.ObjectNotFound as exc:
        raise Failure(f"backend {backend.name}: pool {backend.pool!r} not found") from exc
    except (rados.PermissionError, rados.PermissionDeniedError, rbd.PermissionError,
            PermissionError) as exc:
        raise Failure(f"backend {backend.name}: the cluster refused {entity} in pool "
                      f"{backend.pool!r} ({exc}): glance's cephx user needs the caps "
                      f"{_native._glance_caps(backend.pool)}; `ceph auth get {entity}` shows "
                      "the caps it has") from exc
    except (rados.TimedOut, rbd.Timeout) as exc:
        raise Failure(f"backend {backend.name}: the cluster did not answer {entity} in pool "
                      f"{backend.pool!r} in time ({exc}): the OSDs may be down or unreachable, "
                      f"or {entity} may have no osd cap on the pool (a Ceph 20 cluster leaves "
                      "the operations of such a user unanswered); glance's cephx user needs the "
                      f"caps {_native._glance_caps(backend.pool)}; `ceph auth get {entity}` "
                      "shows the caps it has") from exc
    except rados.Error as exc:
        raise Failure(f"backend {backend.name}: {exc}") from exc
    finally:
        cluster.shutdown()


def _look(args, backend, cluster, ioctx):
    found = leftovers.uploads(cluster, ioctx)
    result = {"backend": backend.name, "pool": backend.pool}
    now = time.time()
    if args.command == "status":
        listed = [u for u in found if u.state in ("alive", "gone")]
        result["uploads"] = [u.as_dict(now) for u in listed]
        return result
    gone = [u for u in found if u.state == "gone"]
    stale = [u for u in found if u.state in ("missing", "finished")]
    unmarked = []
    if args.include_unmarked:
        if args.older_than is None:
            raise Failure("--include-unmarked needs --older-than AGE", 2)
        unmarked = leftovers.unmarked(cluster, ioctx, args.older_than,
                                      skip={u.image for u in found})
    result["gone"] = [u.as_dict(now) for u in gone]
    result["unmarked"] = [u.as_dict(now) for u in unmarked]
    result["stale_marks"] = len(stale)
    if args.remove:
        for listed, upload in zip(result["gone"] + result["unmarked"], gone + unmarked):
            listed["outcome"] = leftovers.remove(cluster, ioctx, upload)
        for upload in stale:
            leftovers.remove(cluster, ioctx, upload)
    return result


def _print(args, result):
    where = f"{result['backend']}: {result['pool']}"
    if args.command == "status":
        if not result["uploads"]:
            print(f"{where}: no upload in flight")
        for upload in result["uploads"]:
            writer = "writer alive" if upload["state"] == "alive" else "writer GONE"
            print(f"{where}/{upload['image']}  {writer}  pid {upload['pid']} on "
                  f"{upload['host']}  age {_duration(upload['age_seconds'])}  "
                  f"{_size(upload['bytes'])} stored  {_rate(upload)}  ({upload['reason']})")
        return
    verb = "removed" if args.remove else "would remove"
    if not result["gone"]:
        print(f"{where}: no partial image whose writer is gone")
    for upload in result["gone"]:
        print(f"{where}/{upload['image']}  {upload.get('outcome', verb)}: {upload['reason']}; "
              f"pid {upload['pid']} on {upload['host']}, started "
              f"{_duration(upload['age_seconds'])} ago, {_size(upload['bytes'])} stored")
    for upload in result["unmarked"]:
        print(f"{where}/{upload['image']}  {upload.get('outcome', verb)} (unmarked): "
              f"{upload['reason']}; created {_duration(upload['age_seconds'])} ago")
    if result["stale_marks"]:
        done = "dropped" if args.remove else "--remove drops them"
        print(f"{where}: {result['stale_marks']} stale marks of finished or removed images "
              f"({done})")


def _duration(seconds):
    if seconds is None:
        return "?"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def _size(value):
    if value is None:
        return "?"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value} B"


def _rate(upload):
    rate = upload["rate_bytes_per_second"]
    return f"{_size(rate)}/s" if rate else "rate ?"
