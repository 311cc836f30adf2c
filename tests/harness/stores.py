"""glance_store rbd stores on a cluster, and the pool read back through Debian's rbd module,
independently of the code under test: shared by the tests, the demo and the benchmarks."""

import glance_store
import rados
import rbd
from glance_store import location, multi_backend
from glance_store._drivers import rbd as rbd_driver
from oslo_config import cfg

from tests.harness.data import MiB

SNAP = rbd_driver.DEFAULT_SNAPNAME


def glance_api_conf(path, pool, user, ceph_conf, extra=""):
    """Writes at `path` a glance-api.conf with one rbd store, [glance_store], on `pool` as
    `user` of `ceph_conf` (what `glance-rbd-native` reads); `extra`: more lines of the section."""
    path.write_text(f"""[glance_store]
stores = rbd
default_store = rbd
rbd_store_pool = {pool}
rbd_store_user = {user}
rbd_store_ceph_conf = {ceph_conf}
{extra}""")
    return path


def make_store(
    cluster,
    *,
    chunk_mib=8,
    thin=False,
    backend=None,
    timeout=-1,
    pool=None,
    user=None,
    conf_file=None,
    defaults=(),
):
    """A configured glance_store rbd Store on `cluster`, single-store or in a multi-store set-up,
    connecting as the cluster's store user (client.admin unless the cluster names another).

    Options named in `defaults` go to [backend_defaults] (glance_store 5.0 on) instead of the
    backend's own group."""
    conf = cfg.ConfigOpts()
    conf(args=[])
    options = dict(
        rbd_store_chunk_size=chunk_mib,
        rbd_store_pool=pool or cluster.pool,
        rbd_store_user=user or cluster.store_user,
        rbd_store_ceph_conf=str(conf_file or (cluster.conf_path if user else cluster.store_conf)),
        rados_connect_timeout=timeout,
        rbd_thin_provisioning=thin,
    )
    if backend:
        conf.register_opt(cfg.DictOpt("enabled_backends"))
        conf.set_override("enabled_backends", {backend: "rbd", "other": "rbd"})
        multi_backend.register_store_opts(conf)
        conf.set_override("default_backend", backend, group="glance_store")
        group = backend
    else:
        glance_store.backend.register_opts(conf)
        group = "glance_store"
    if defaults:
        conf.register_opts(rbd_driver.Store.OPTIONS, group="backend_defaults")
    for key, value in options.items():
        conf.set_override(key, value, group="backend_defaults" if key in defaults else group)
    store = rbd_driver.Store(conf, backend=backend)
    store.configure()
    return store


def locate(store, cluster, name, snapshot=SNAP, pool=None):
    """The Location glance hands the driver for an image it stored there."""
    uri = f"rbd://{cluster.fsid}/{pool or cluster.pool}/{name}/{snapshot}"
    return location.Location("rbd", rbd_driver.StoreLocation, store.conf, uri=uri)


class Images:
    """Direct access to the pool through Debian's rados/rbd modules, independent of the code
    under test."""

    def __init__(self, cluster, pool=None):
        self.pool = pool or cluster.pool
        self._client = rados.Rados(conffile=str(cluster.conf_path), rados_id="admin")
        self._client.connect()
        self._ioctx = self._client.open_ioctx(self.pool)

    def close(self):
        self._ioctx.close()
        self._client.shutdown()

    def names(self):
        return set(rbd.RBD().list(self._ioctx))

    # Plain opens, never read-only ones: librbd 16.2.15 can abort the process when read-only
    # opens and closes follow each other quickly (docs/reliability.md), and the harness opens
    # an image after nearly every upload.

    def read(self, name, snapshot=SNAP):
        with rbd.Image(self._ioctx, name, snapshot=snapshot) as image:
            size = image.size()
            parts, pos = [], 0
            while pos < size:
                part = image.read(pos, min(32 * MiB, size - pos))
                parts.append(part)
                pos += len(part)
            return b"".join(parts)

    def info(self, name):
        """Size, and each snapshot with whether it is protected."""
        with rbd.Image(self._ioctx, name) as image:
            snaps = {s["name"]: image.is_protected_snap(s["name"]) for s in image.list_snaps()}
            return {"size": image.size(), "snaps": snaps}

    def watchers(self, name):
        """The watchers of image `name`, but this access's own (a plain open adds one)."""
        me = self._client.get_instance_id()
        with rbd.Image(self._ioctx, name) as image:
            return [w for w in image.watchers_list() if w["id"] != me]

    def data_objects(self, name):
        """How many RADOS data objects back the image: all-zero ranges written thin make none."""
        with rbd.Image(self._ioctx, name) as image:
            prefix = image.stat()["block_name_prefix"]
        return sum(1 for obj in self._ioctx.list_objects() if obj.key.startswith(prefix + "."))

    def store(self, name, data):
        """Image `name` holding `data` with glance's protected snapshot, written independently
        of both drivers."""
        self.create(name, len(data))
        if data:
            self.write(name, data)
        self.snapshot(name)
        return name

    def create(self, name, size):
        rbd.RBD().create(self._ioctx, name, size, old_format=False)

    def write(self, name, data, offset=0):
        with rbd.Image(self._ioctx, name) as image:
            image.write(data, offset)

    def snapshot(self, name, snap=SNAP):
        """A protected snapshot, as glance makes of every image it stores."""
        with rbd.Image(self._ioctx, name) as image:
            image.create_snap(snap)
            image.protect_snap(snap)

    @property
    def ioctx(self):
        return self._ioctx

    @property
    def client(self):
        """The `rados.Rados` of `ioctx`, as admin."""
        return self._client

    def remove_snapshots(self, name):
        with rbd.Image(self._ioctx, name) as image:
            for snap in list(image.list_snaps()):
                if image.is_protected_snap(snap["name"]):
                    image.unprotect_snap(snap["name"])
                image.remove_snap(snap["name"])

    def purge_trash(self, names):
        """Removes the images of these names from the pool's trash."""
        for entry in rbd.RBD().trash_list(self._ioctx):
            if entry["name"] in names:
                rbd.RBD().trash_remove(self._ioctx, entry["id"], force=True)

    def remove(self, name):
        """Removes an image and its snapshots; a missing image is fine."""
        try:
            self.remove_snapshots(name)
            rbd.RBD().remove(self._ioctx, name)
        except rbd.ImageNotFound:
            pass
