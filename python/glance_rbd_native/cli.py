"""``glance-rbd-native`` (also ``python -m glance_rbd_native``): the uploads in flight in
glance's rbd backends, the partial images of those whose writer is gone, and the deleted images
whose data a process that is gone was removing; and ``check``, the pre-flight check (check.py).

    glance-rbd-native check [--json] [--no-write] [--size MIB] --config-file glance-api.conf
    glance-rbd-native status --config-file /etc/glance/glance-api.conf
    glance-rbd-native sweep [--remove] --config-file /etc/glance/glance-api.conf
    glance-rbd-native sweep --include-unmarked --older-than 1d [--remove IMAGE... | --all-unmarked]

It reads glance-api's configuration as glance-manage does, and looks at every rbd backend of
``enabled_backends`` (or the ``[glance_store]`` one), or at ``--backend NAME``: one that cannot
be read is reported as failed, and the others still are. The options go before or after the
command. ``sweep`` changes nothing without ``--remove``, which goes on past a removal that fails.
Exit status (``EXIT_*``): 0 when every backend was read (and ``sweep --remove`` removed all it set
out to), 1 when a backend could not be read or ``sweep --remove`` left some of what it set out to
remove (each named), 2 for a bad command line or configuration (``check`` exits with
oslo.upgradecheck's codes). The rules are in ``leftovers``; the backends, in ``backends``.
"""

import argparse
import errno
import json
import logging
import re
import sys
import time
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional, TypedDict, TypeVar, cast

from glance_rbd_native import leftovers, settings
from glance_rbd_native.backends import (
    EXIT_DONE,
    EXIT_LEFT,
    EXIT_USAGE,
    Backend,
    Failure,
    connected,
    read,
)
from glance_rbd_native.leftovers import deletes, printable
from glance_rbd_native.units import duration, size

if TYPE_CHECKING:
    from oslo_config import cfg

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# What status lists, and what sweep lists as kept.
STATUS_STATES = ("alive", "silent", "gone", "unreadable")
# The image names glance's database references, or None and why it could not be read.
Referenced = tuple[Optional[set[str]], Optional[str]]


class _Result(TypedDict):
    backend: str
    pool: str


class Result(_Result, total=False):
    """What the command found in one backend, as it prints it in JSON."""

    # status
    uploads: list[leftovers.UploadDict]
    # status, and sweep (those whose deleter is gone, and those kept)
    deletes: list[deletes.DeletionDict]
    # sweep
    gone: list[leftovers.UploadDict]
    kept: list[leftovers.UploadDict]
    unmarked: list[leftovers.UploadDict]
    stale_marks: int
    # sweep --remove: how many of those it set out to remove are left (their outcome says why)
    left: int
    # sweep --include-unmarked: "read", or why not
    database: str
    # a backend that could not be read: why (it has no other field then)
    error: str


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parse(argv)
    # glance_store's deprecation notices and its drivers that cannot load (cinder without
    # os-brick) are for glance-api's log, not for this command's output.
    warnings.simplefilter("ignore")
    logging.basicConfig(level=logging.CRITICAL, format="%(name)s: %(message)s")
    try:
        if args.command == "check":
            from glance_rbd_native import check

            conf, backends = read(args.config_file, args.backend, bound=check.CONNECT_TIMEOUT)
            checks = check.Checks(conf, backends, args.no_write, args.size)
            return check.run(checks, args.json)
        conf, backends = read(args.config_file, args.backend)
        _check(args)
        if args.presume_gone_after is None:
            args.presume_gone_after = settings.presume_gone_after(conf)
        referenced = _referenced(conf) if getattr(args, "include_unmarked", False) else None
    except Failure as failure:
        print(f"glance-rbd-native: {failure}", file=sys.stderr)
        return failure.status
    results, statuses = [], []
    for backend in backends:
        result, status = _report(args, backend, referenced)
        results.append(result)
        statuses.append(status)
    if args.format == "json":
        print(json.dumps(results, indent=2))
    else:
        for result in results:
            _print(args, result)
    return max(statuses, default=EXIT_DONE)


def _report(
    args: argparse.Namespace, backend: "Backend", referenced: Optional[Referenced]
) -> tuple[Result, int]:
    """What one backend holds, and its exit status: a backend that cannot be read is reported
    as failed, and the others still are."""
    failure = backend.failure
    if failure is None:
        try:
            result = _run(args, backend, referenced)
        except Failure as raised:
            failure = raised
        else:
            return result, EXIT_LEFT if result.get("left") else EXIT_DONE
    return {"backend": backend.name, "pool": backend.pool, "error": str(failure)}, failure.status


def _parse(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    args = _parser().parse_args(argv)
    # Given after the command: added to those given before it.
    args.config_file = args.config_file + args.config_file_after
    args.backend = args.backend_after or args.backend
    return args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glance-rbd-native",
        description="Uploads in flight in glance's rbd backends, and the partial images whose "
        "writer is gone.",
    )
    _configuration(parser, "")
    commands = parser.add_subparsers(dest="command", required=True)
    configured = argparse.ArgumentParser(add_help=False)
    _configuration(configured, "_after")
    common = argparse.ArgumentParser(add_help=False, parents=[configured])
    common.add_argument("--format", choices=("text", "json"), default="text")
    common.add_argument(
        "--presume-gone-after",
        type=_age,
        metavar="AGE",
        help="a writer that cannot be seen from this host (another host, "
        "another container's pids) is presumed gone after this long with "
        "neither a watch nor a refresh of its mark (default: "
        f"[{settings.GROUP.name}] presume_gone_after of the "
        "configuration, 1h)",
    )
    commands.add_parser(
        "status",
        parents=[common],
        help="every upload in flight: host, pid, age, bytes, rate, and whether its writer lives",
    )
    check = commands.add_parser(
        "check",
        parents=[configured],
        help="before turning the native driver on, and after each upgrade: glance_store, the "
        "native module and its libraries, each rbd backend's cluster and pool; oslo.upgradecheck's "
        "table and exit codes (0 success, 1 warning, 2 failure, 255 error)",
    )
    check.add_argument("--json", action="store_true", help="the results as JSON")
    check.add_argument(
        "--no-write",
        action="store_true",
        help="write nothing to the cluster: the caps are not probed (but the manager's), and "
        "there is no round trip",
    )
    check.add_argument(
        "--size",
        type=_mebibytes,
        default=64,
        metavar="MIB",
        help="the MiB of the round trip through the stock and the native driver (default 64)",
    )
    sweep = commands.add_parser(
        "sweep",
        parents=[common],
        help="the partial images whose writer is gone; --remove removes them",
    )
    sweep.add_argument(
        "--remove",
        action="store_true",
        help="remove the partial images whose writer is gone (fencing first a "
        "writer presumed gone), and drop stale marks",
    )
    sweep.add_argument(
        "--include-unmarked",
        action="store_true",
        help="also list partial images without a native mark (stock's, another "
        "tool's), named as glance names images, with no watcher, that "
        "glance's database does not reference; needs --older-than; lists "
        "the whole pool",
    )
    sweep.add_argument(
        "--older-than",
        type=_age,
        metavar="AGE",
        help="with --include-unmarked: created at least this long ago, e.g. 3600, 30m, 12h, 2d",
    )
    sweep.add_argument(
        "images",
        nargs="*",
        metavar="IMAGE",
        help="with --include-unmarked --remove: the unmarked images to remove, "
        "out of those it lists",
    )
    sweep.add_argument(
        "--all-unmarked",
        action="store_true",
        help="with --include-unmarked --remove: remove every unmarked image it lists",
    )
    return parser


def _configuration(parser: argparse.ArgumentParser, suffix: str) -> None:
    """--config-file and --backend, accepted before and after the command."""
    parser.add_argument(
        "--config-file",
        action="append",
        default=[],
        metavar="PATH",
        dest="config_file" + suffix,
        help="glance-api's configuration; repeat for more files, read in order "
        "(default: oslo.config's search, as glance-manage)",
    )
    parser.add_argument(
        "--backend",
        metavar="NAME",
        dest="backend" + suffix,
        help="only this backend of enabled_backends (default: every rbd one)",
    )


def _mebibytes(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a whole number of MiB, 1 or more: {text!r}")
    return value


def _check(args: argparse.Namespace) -> None:
    if args.command != "sweep":
        return
    if args.include_unmarked and args.older_than is None:
        raise Failure("--include-unmarked needs --older-than AGE", EXIT_USAGE)
    if (args.images or args.all_unmarked) and not (args.include_unmarked and args.remove):
        raise Failure("IMAGE and --all-unmarked go with --include-unmarked --remove", EXIT_USAGE)
    if args.images and args.all_unmarked:
        raise Failure(
            "name the unmarked images to remove, or give --all-unmarked: not both", EXIT_USAGE
        )


def _age(text: str) -> int:
    match = re.fullmatch(r"(\d+)([smhd]?)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an age such as 3600, 30m, 12h or 2d")
    return int(match.group(1)) * UNITS[match.group(2) or "s"]


def _referenced(conf: "cfg.ConfigOpts") -> Referenced:
    """(names, None) of the images glance's database references: the ids of its images not
    deleted, and the image names of their locations; or (None, why) where it cannot be read."""
    url = conf.database.connection
    if not url:
        return None, "the configuration has no [database] connection"
    try:
        import sqlalchemy
    except ImportError:
        return None, "SQLAlchemy is not installed here"
    try:
        engine = sqlalchemy.create_engine(url)
        try:
            with engine.connect() as db:
                ids = {
                    row[0]
                    for row in db.execute(
                        sqlalchemy.text("SELECT id FROM images WHERE deleted = :no"), {"no": False}
                    )
                }
                locations = [
                    row[0]
                    for row in db.execute(
                        sqlalchemy.text("SELECT value FROM image_locations WHERE deleted = :no"),
                        {"no": False},
                    )
                ]
        finally:
            engine.dispose()
    except Exception as exc:  # any driver's error: the operator reads why
        first = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        return None, f"reading it failed ({type(exc).__name__}: {first})"
    names = set(ids)
    for location in locations:
        # rbd://FSID/POOL/IMAGE/SNAP, or rbd://IMAGE of the oldest releases.
        if location and location.startswith("rbd://"):
            parts = location[len("rbd://") :].split("/")
            names.add(parts[2] if len(parts) == 4 else parts[0])
    return names, None


def _run(args: argparse.Namespace, backend: Backend, referenced: Optional[Referenced]) -> Result:
    import rados
    import rbd

    entity = f"client.{backend.user or 'admin'}"
    with connected(backend) as cluster:
        try:
            with cluster.open_ioctx(backend.pool) as ioctx:
                return _look(args, backend, leftovers.Pool(cluster, ioctx), referenced)
        except rados.ObjectNotFound as exc:
            raise Failure(f"backend {backend.name}: pool {backend.pool!r} not found") from exc
        except (
            rados.PermissionError,
            rados.PermissionDeniedError,
            rbd.PermissionError,
            PermissionError,
        ) as exc:
            raise _refused(backend, entity, errno.EPERM, "refused {entity} in {pool}", exc) from exc
        except (rados.TimedOut, rbd.Timeout) as exc:
            what = "did not answer {entity} in {pool} in time"
            raise _refused(backend, entity, errno.ETIMEDOUT, what, exc) from exc
        except (rados.Error, rbd.Error) as exc:
            raise Failure(f"backend {backend.name}: {exc}") from exc


def _refused(backend: Backend, entity: str, code: int, what: str, exc: Exception) -> Failure:
    """The cluster refused the user, or left it unanswered, in the backend's pool (`what`, of
    `{entity}` and `{pool}`): in the native driver's words, with the caps glance's user needs."""
    from glance_rbd_native import _native

    advice = _native._caps_advice(code, backend.pool, entity)
    what = what.format(entity=entity, pool=f"pool {backend.pool!r}")
    return Failure(f"backend {backend.name}: the cluster {what} ({exc}): {advice}")


def _look(
    args: argparse.Namespace,
    backend: Backend,
    pool: leftovers.Pool,
    referenced: Optional[Referenced],
) -> Result:
    found = leftovers.uploads(pool, args.presume_gone_after)
    result: Result = {"backend": backend.name, "pool": backend.pool}
    now = time.time()
    deleted = deletes.deletions(pool.ioctx)
    if args.command == "status":
        result["uploads"] = [u.as_dict(now) for u in found if u.state in STATUS_STATES]
        result["deletes"] = [d.as_dict(now) for d in deleted if d.state != "stale"]
        return result
    listed_deletes = [d for d in deleted if d.state in ("gone", "kept")]
    result["deletes"] = [d.as_dict(now) for d in listed_deletes]
    gone = [u for u in found if u.state == "gone"]
    kept = [u for u in found if u.state in ("silent", "unreadable")]
    stale = [u for u in found if u.state in ("missing", "finished")]
    unmarked: list[leftovers.Upload] = []
    if args.include_unmarked:
        names, why = cast(Referenced, referenced)  # read by main() for --include-unmarked
        result["database"] = "read" if names is not None else f"not read: {why}"
        unmarked = leftovers.unmarked(
            pool, args.older_than, skip={u.image for u in found}, referenced=names
        )
    result["gone"] = [u.as_dict(now) for u in gone]
    result["kept"] = [u.as_dict(now) for u in kept]
    result["unmarked"] = [u.as_dict(now) for u in unmarked]
    stale_deletes = [d for d in deleted if d.state == "stale"]
    result["stale_marks"] = len(stale) + len(stale_deletes)
    if args.remove:
        outcomes = []
        for listed_delete, deletion in zip(result["deletes"], listed_deletes):
            if deletion.state == "gone":
                listed_delete["outcome"] = _tried(deletes.purge, pool.ioctx, deletion)
                outcomes.append(listed_delete["outcome"])
        # Stale marks: one that changed since it was read is someone's, and not left over.
        for deletion in stale_deletes:
            _tried(deletes.purge, pool.ioctx, deletion)
        for listed, upload in zip(result["gone"], gone):
            listed["outcome"] = _tried(leftovers.remove, pool, upload)
            outcomes.append(listed["outcome"])
        chosen = set(args.images)
        for listed, upload in zip(result["unmarked"], unmarked):
            if args.all_unmarked or upload.image in chosen:
                listed["outcome"] = _tried(leftovers.remove, pool, upload)
                outcomes.append(listed["outcome"])
            else:
                listed["outcome"] = "kept: not named on the command line"
        for upload in stale:
            _tried(leftovers.remove, pool, upload)
        result["left"] = sum(leftovers.left(outcome) for outcome in outcomes)
    return result


_Removed = TypeVar("_Removed", leftovers.Upload, deletes.Deletion)


def _tried(remove: Callable[[Any, _Removed], str], where: Any, removed: _Removed) -> str:
    """The outcome of one removal; one the cluster fails is "left", and the others go on."""
    import rados
    import rbd

    try:
        return remove(where, removed)
    except (rados.Error, rbd.Error, OSError) as exc:
        return f"left: {type(exc).__name__}: {exc}"


def _print(args: argparse.Namespace, result: Result) -> None:
    if "error" in result:
        # Its message names the backend; the others' reports follow on stdout.
        print(f"glance-rbd-native: {result['error']}", file=sys.stderr)
        return
    lines = _status_lines(result) if args.command == "status" else _sweep_lines(args, result)
    for line in lines:
        print(line)


def _status_lines(result: Result) -> list[str]:
    """`status`: each upload in flight, then each delete whose data is being removed."""
    where = f"{result['backend']}: {result['pool']}"
    lines = [] if result["uploads"] else [f"{where}: no upload in flight"]
    lines += [
        f"{where}/{u['image']}  {_STATE_WORDS[u['state']]}  {_writer(u)}  "
        f"age {duration(u['age_seconds'])}  {size(u['bytes'])} stored  {_rate(u)}  "
        f"({u['reason']})"
        for u in result["uploads"]
    ]
    lines += [
        f"{where}/{d['image']}  deleted, data in the trash as {d['image_id']}  "
        f"{_DELETE_WORDS[d['state']]}  {_writer(d)}  age {duration(d['age_seconds'])}  "
        f"({d['reason']})"
        for d in result["deletes"]
    ]
    return lines


def _sweep_lines(args: argparse.Namespace, result: Result) -> list[str]:
    """`sweep`: what it removes (or would), what it keeps and why, then the totals."""
    where = f"{result['backend']}: {result['pool']}"
    verb = "removed" if args.remove else "would remove"
    purge = "purged" if args.remove else "would purge"
    lines = [] if result["gone"] else [f"{where}: no partial image whose writer is gone"]
    lines += [
        f"{where}/{u['image']}  {u.get('outcome', verb)}: {u['reason']}; {_writer(u)}, "
        f"started {duration(u['age_seconds'])} ago, {size(u['bytes'])} stored"
        for u in result["gone"]
    ]
    lines += [f"{where}/{u['image']}  kept: {u['reason']}" for u in result["kept"]]
    for d in result["deletes"]:
        done = d.get("outcome", purge) if d["state"] == "gone" else "kept"
        lines.append(
            f"{where}/{d['image']} (deleted, trash id {d['image_id']})  {done}: {d['reason']}"
        )
    if "database" in result and result["database"] != "read":
        lines.append(
            f"{where}: glance's database was {result['database']}: the unmarked images below "
            "may still be glance's"
        )
    lines += [
        f"{where}/{u['image']}  {u.get('outcome', verb)} (unmarked): {u['reason']}; "
        f"created {duration(u['age_seconds'])} ago"
        for u in result["unmarked"]
    ]
    if result["stale_marks"]:
        done = "dropped" if args.remove else "--remove drops them"
        lines.append(
            f"{where}: {result['stale_marks']} stale marks of finished or removed images ({done})"
        )
    if result.get("left"):
        lines.append(f"{where}: {result['left']} of those to remove are left, each with why above")
    return lines


_DELETE_WORDS = {"deleting": "deleter alive", "gone": "deleter GONE", "kept": "KEPT"}

_STATE_WORDS = {
    "alive": "writer alive",
    "gone": "writer GONE",
    "silent": "writer SILENT",
    "unreadable": "mark UNREADABLE",
}


def _writer(upload: "leftovers.UploadDict | deletes.DeletionDict") -> str:
    if upload["pid"] is None:
        return "writer unknown"
    where = f" in {upload['cgroup']}" if upload.get("cgroup") else ""
    return printable(f"pid {upload['pid']} on {upload['host']}{where}")


def _rate(upload: leftovers.UploadDict) -> str:
    rate = upload["rate_bytes_per_second"]
    return f"{size(rate)}/s" if rate else "rate ?"
