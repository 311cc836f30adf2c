"""Imported by uWSGI's master before it forks its workers (GlanceApi(preconnect=True)): opens
a native connection to the cluster there, the way an app that talks to Ceph at load time would.
The workers inherit the handle without the threads behind it, and must connect on their own."""

import os
import uuid

import glance_rbd_native

glance_rbd_native.RbdWriter(
    os.environ["GRN_PRECONNECT_POOL"],
    f"preconnect-{uuid.uuid4()}",
    conffile=os.environ["GRN_PRECONNECT_CONF"],
    user=os.environ["GRN_PRECONNECT_USER"],
).abort()
assert glance_rbd_native.connection_count() == 1
print(f"glance-rbd-native: connected in uWSGI's master, pid {os.getpid()}", flush=True)
