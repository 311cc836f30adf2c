"""cephx users that are wrong in one way each (a key the client cannot parse, a wrong key, a cap
missing), and what glance_store's rbd Store does as each of them: for any cluster of
tests/harness/cluster.py, whatever its Ceph release, so the same cases run against a Ceph 16
cluster here and a Ceph 20 one elsewhere."""

from __future__ import annotations

import base64
import dataclasses
import io
import os
import struct
import subprocess
import time
from collections.abc import Callable

from glance_store import location
from glance_store._drivers import rbd as rbd_driver

from tests.harness import command
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import glance_api_conf, make_store


def glance_caps(pool: str) -> dict[str, str]:
    """glance's documented user: `ceph auth get-or-create client.glance mon 'profile rbd'
    osd 'profile rbd pool=images' mgr 'profile rbd pool=images'`."""
    return {
        "mon": "profile rbd",
        "osd": f"profile rbd pool={pool}",
        "mgr": f"profile rbd pool={pool}",
    }


def cephx_key(kind: int = 1) -> str:
    """A new cephx key, base64: a CryptoKey of `kind` 1 (aes, 16 bytes, "AQ...", every release)
    or 2 (aes256k, 32 bytes, "Ag...", what a Ceph 20 cluster makes)."""
    size = {1: 16, 2: 32}[kind]
    return base64.b64encode(
        struct.pack("<HIIH", kind, int(time.time()), 0, size) + os.urandom(size)
    ).decode()


@dataclasses.dataclass(frozen=True)
class Case:
    """A user that is glance's documented one but for one thing."""

    name: str
    # The caps for the pool given: a dict as Cluster.user takes it.
    caps: Callable[[str], dict[str, str]]
    # The user's key: None, the one the cluster made; "aes", a legacy aes key given to the user
    # on the cluster (`ceph auth import`); "aes256k", the cluster's own if it made an aes256k
    # one (Ceph 20), else one the cluster does not know. Or, in its keyring: "wrong", an aes key
    # the cluster does not know; "absent", no key for the user; "missing", no keyring at all
    # (the conf names one that is not there).
    key: str | None = None


def _without(cap):
    return lambda pool: {k: v for k, v in glance_caps(pool).items() if k != cap}


CASES = {
    case.name: case
    for case in (
        Case("aes-key", glance_caps, key="aes"),
        Case("aes256k-key", glance_caps, key="aes256k"),
        Case("wrong-key", glance_caps, key="wrong"),
        Case("no-key-in-keyring", glance_caps, key="absent"),
        Case("no-keyring", glance_caps, key="missing"),
        Case("no-mon-cap", _without("mon")),
        Case("no-osd-cap", _without("osd")),
        Case(
            "osd-cap-on-another-pool",
            lambda pool: {
                "mon": "profile rbd",
                "osd": "profile rbd pool=another",
                "mgr": "profile rbd pool=another",
            },
        ),
        Case("no-mgr-cap", _without("mgr")),
    )
}


@dataclasses.dataclass
class User:
    """A cephx user made for a case: its id (rbd_store_user), conf and keyring."""

    id: str
    conf: os.PathLike
    keyring: os.PathLike

    @property
    def entity(self) -> str:
        return f"client.{self.id}"


def make_user(cluster, case: Case, prefix: str = "glance") -> User:
    """The user `<prefix>-<case>` on `cluster`, with the case's caps and keyring."""
    user = f"{prefix}-{case.name}"
    conf = cluster.user(user, **case.caps(cluster.pool))
    keyring = cluster.root / f"ceph.client.{user}.keyring"
    if case.key == "aes":
        caps = "".join(f'\tcaps {k} = "{v}"\n' for k, v in case.caps(cluster.pool).items())
        keyring.write_text(f"[client.{user}]\n\tkey = {cephx_key(1)}\n{caps}")
        cluster.mon("auth import", stdin=keyring)
    elif case.key == "aes256k" and "key = Ag" not in keyring.read_text():
        keyring.write_text(f"[client.{user}]\n\tkey = {cephx_key(2)}\n")
    elif case.key == "wrong":
        keyring.write_text(f"[client.{user}]\n\tkey = {cephx_key(1)}\n")
    elif case.key == "absent":
        keyring.write_text(f"[client.someone-else]\n\tkey = {cephx_key(1)}\n")
    elif case.key == "missing":
        keyring = cluster.root / f"missing.client.{user}.keyring"
        conf.write_text(
            conf.read_text().replace(
                f"keyring = {cluster.root}/ceph.client.{user}.keyring", f"keyring = {keyring}"
            )
        )
    return User(user, conf, keyring)


@dataclasses.dataclass
class Outcome:
    """What one call gave: its result, or the exception it raised."""

    result: object = None
    error: BaseException | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def _run(call) -> Outcome:
    try:
        return Outcome(result=call())
    except Exception as exc:  # what is raised is the finding
        return Outcome(error=exc)


def store_as(cluster, user: User, **options):
    """A Store of glance_store's rbd driver as `user`, with librados timeouts of 10 s."""
    return make_store(
        cluster, chunk_mib=1, user=user.id, conf_file=user.conf, timeout=10, **options
    )


def upload(cluster, user: User, name: str) -> Outcome:
    """`Store.add` of 3 MiB as `user`, through the driver in place (stock, or patched)."""
    data = data_of(3 * MiB)
    return _run(lambda: store_as(cluster, user).add(name, io.BytesIO(data), len(data), "sha512")[1])


def stored_image(cluster, images) -> tuple[str, str]:
    """An image as glance stores it (data, protected snapshot `snap`), made by the admin
    through `images` (tests.harness.stores.Images): (name, location URI)."""
    name = new_name("cephx-read")
    images.create(name, MiB)
    images.write(name, data_of(MiB))
    images.snapshot(name)
    return name, f"rbd://{cluster.fsid}/{cluster.pool}/{name}/{rbd_driver.DEFAULT_SNAPNAME}"


def downloads(cluster, user: User, uri: str) -> dict[str, Outcome]:
    """`Store.get_size` and `Store.get` (read to the end) of the image at `uri`, as `user`,
    through the driver in place."""
    store = store_as(cluster, user)
    loc = location.Location("rbd", rbd_driver.StoreLocation, store.conf, uri=uri)

    def get():
        chunks, size = store.get(loc)
        return size, sum(len(chunk) for chunk in chunks)

    return {"get_size": _run(lambda: store.get_size(loc)), "get": _run(get)}


def cli_as(cluster, user: User, tmp_path, *args) -> subprocess.CompletedProcess:
    """`glance-rbd-native --config-file glance-api.conf ARGS` with glance's store as `user`."""
    glance_conf = glance_api_conf(
        tmp_path / f"glance-api.{user.id}.conf",
        cluster.pool,
        user.id,
        user.conf,
        extra="rados_connect_timeout = 10\n",
    )
    return command.run(glance_conf, *args, check=False)
