"""A round trip through glance_store's rbd Store, patched, for tests/test_index.py: run by path
in a glance virtualenv that pip installed the package into from an index, so that it imports
nothing from the checkout.

    python tests/harness/index_round_trip.py CEPH_CONF POOL IMAGE_ID SIZE

Stores SIZE random bytes as glance-api's single-store set-up does, reads them back and deletes
the image; prints JSON of what it saw. The native writer's INFO lines go to stderr.
"""

import hashlib
import io
import json
import logging
import os
import sys

import glance_store.backend
from glance_store import location
from glance_store._drivers import rbd as rbd_driver
from oslo_config import cfg

import glance_rbd_native


def main():
    conf_file, pool, image_id, size = sys.argv[1:]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(name)s %(message)s")
    conf = cfg.ConfigOpts()
    conf(args=[])
    glance_store.backend.register_opts(conf)
    options = {"rbd_store_pool": pool, "rbd_store_user": "admin", "rbd_store_ceph_conf": conf_file}
    for key, value in options.items():
        conf.set_override(key, value, group="glance_store")
    patched = glance_rbd_native.patch()
    store = rbd_driver.Store(conf)
    store.configure()
    data = os.urandom(int(size))
    uri, stored, checksum, multihash, _ = store.add(image_id, io.BytesIO(data), len(data), "sha512")
    where = location.Location("rbd", rbd_driver.StoreLocation, conf, uri=uri)
    chunks, length = store.get(where)
    read = b"".join(chunks)
    store.delete(where)
    print(
        json.dumps(
            {
                "patched": patched,
                "module": glance_rbd_native._native.__file__,
                "stored": stored,
                "length": length,
                "checksum_right": checksum == hashlib.md5(data).hexdigest(),
                "multihash_right": multihash == hashlib.sha512(data).hexdigest(),
                "read_right": read == data,
            }
        )
    )


if __name__ == "__main__":
    main()
