"""A command run where some of the host's shared libraries are not there: in a mount namespace
of its own, an overlay over the directory they live in deletes them. What a host without Ceph's
client libraries, or without OpenSSL 3, looks like to the dynamic loader. Needs root."""

import os
import subprocess

# $LIBDIR: the libraries' directory; $TMPDIR: where the overlay's layers go; $REMOVE: the names.
SCRIPT = """\
set -e
mount -t tmpfs tmpfs "$TMPDIR"
mkdir "$TMPDIR/upper" "$TMPDIR/work"
mount -t overlay overlay -o "lowerdir=$LIBDIR,upperdir=$TMPDIR/upper,workdir=$TMPDIR/work" "$LIBDIR"
for name in $REMOVE; do rm "$LIBDIR"/$name; done
exec "$@"
"""


def propagation():
    """How the namespace's mounts propagate: made private, unless nothing here is shared (as in
    the Debian roots' private namespaces, where under chroot / is not a mount point and its
    propagation cannot be changed): then no mount can reach another namespace anyway."""
    with open("/proc/self/mountinfo") as mounts:
        shared = any(" shared:" in line.split(" - ")[0] for line in mounts)
    return "private" if shared else "unchanged"


def library_dir(name):
    """The directory this process loaded `name` from."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith(name):
                return os.path.dirname(os.path.realpath(path))
    raise LookupError(f"{name} is not loaded")


def run(removed, argv, tmp_path, env=None, timeout=60):
    """Runs `argv` where the files matching the globs `removed` are gone from the directory
    this process loaded librbd from (after the native module loaded it here)."""
    import glance_rbd_native

    assert glance_rbd_native.RbdWriter  # loads librbd here, to find where it lives
    env = {
        **(env or os.environ),
        "TMPDIR": str(tmp_path),
        "LIBDIR": library_dir("librbd.so"),
        "REMOVE": " ".join(removed),
    }
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            propagation(),
            "--",
            "sh",
            "-c",
            SCRIPT,
            "sh",
            *argv,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
