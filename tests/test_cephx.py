"""glance's cephx user, wrong in one way at a time (tests/harness/cephx.py): a key this client
cannot parse, a wrong key, a keyring without the user or none at all, and each cap missing.
Each case runs for real through the stock driver, the oracle, and the native one, for uploads,
downloads and `glance-rbd-native status`: the native error is of stock's type, says what is
wrong, and nothing is left behind (no image, no connection, no thread). CEPH16 holds what a
Ceph 16 cluster and client give; the cases and helpers take any cluster."""

import dataclasses
import os

import pytest
import rados
import rbd
from glance_store import exceptions

import glance_rbd_native
from glance_rbd_native import _native, log_pump
from tests.harness.cephx import (
    CASES,
    Case,
    cli_as,
    downloads,
    glance_caps,
    make_user,
    stored_image,
    upload,
)
from tests.harness.data import MiB, new_name

pytestmark = pytest.mark.cluster

CAPS = "mon 'profile rbd' osd 'profile rbd pool={pool}' mgr 'profile rbd pool={pool}'"


@dataclasses.dataclass(frozen=True)
class Refusal:
    """How a case fails: librados' errno, and at which step stock's rados or rbd call failed
    (the words of its message); stock's exception; what native's message says. The words are
    templates of {entity}, {keyring}, {pool}, {image} and {caps}."""

    errno: int
    stock_step: str
    stock: type
    words: tuple[str, ...]

    @property
    def at_connect(self):
        """Refused at connect (BackendException), rather than an operation refused later."""
        return self.stock is exceptions.BackendException


def _connect(errno, *words):
    # Stock raises BackendException() with no message, from inside its except clause: the
    # rados error it caught is its __context__.
    return Refusal(
        errno,
        "error connecting to the cluster",
        exceptions.BackendException,
        ("connecting to the monitors failed", f"(errno {errno})", *words),
    )


_AUTH = (
    "authentication failed for {entity} with keyring {keyring}: the monitors refused it",
    "glance's user needs mon 'profile rbd'",
    "`ceph auth get {entity}`",
)
_CAPS = (
    "as {entity} was refused: Operation not permitted (errno 1)",
    "glance's cephx user needs the caps {caps}",
    "`ceph auth get {entity}`",
)

# Ceph 16.2.15 (Debian 12's packages), client and cluster: uploads (the image's creation is
# refused), then downloads (its open). None: it works. A legacy aes key given with `ceph auth
# import` is what every key of this release is; a missing mgr cap does not matter to rbd I/O
# on it.
CEPH16 = {
    "aes-key": None,
    "aes256k-key": _connect(
        5,
        "this client cannot parse keyring {keyring}: the key of {entity} there is an aes256k "
        "key (cephx key type 2), which needs a Ceph 20 (Tentacle) client",
        "`ceph-authtool KEYRING --gen-key -n {entity} --key-type aes`",
        "`ceph mon set auth_allowed_ciphers aes,aes256k`",
    ),
    "wrong-key": _connect(13, *_AUTH),
    "no-mon-cap": _connect(13, *_AUTH),
    "no-key-in-keyring": _connect(13, "keyring {keyring} has no key for {entity}"),
    "no-keyring": _connect(2, "no keyring for {entity}: none of {keyring} exists"),
    "no-osd-cap": Refusal(1, "error creating image", rbd.PermissionError, _CAPS),
    "osd-cap-on-another-pool": Refusal(1, "error creating image", rbd.PermissionError, _CAPS),
    "no-mgr-cap": None,
}
# Ceph 20 leaves the operations of a user with no osd cap at all unanswered (Ceph 16 refuses
# them): with librados' op timeout (10 s here) they time out, and stock raises rbd.Timeout.
_NO_ANSWER = Refusal(
    110,
    "error creating image",
    rbd.Timeout,
    (
        "as {entity} got no answer in time: Connection timed out (errno 110)",
        "{entity} may have no osd cap on the pool",
        "glance's cephx user needs the caps {caps}",
    ),
)
# The host's Ceph 16 client on a Ceph 20 cluster that allows aes, its users given aes keys
# (docs/deployment.md, older glance hosts).
CEPH20_FROM_CEPH16 = {**CEPH16, "no-osd-cap": _NO_ANSWER}
# A Ceph 20 client on a Ceph 20 cluster with its defaults: aes256k keys are the cluster's own,
# and a legacy aes key is refused by the monitors.
CEPH20 = {
    **CEPH16,
    "no-osd-cap": _NO_ANSWER,
    "aes256k-key": None,
    "aes-key": _connect(
        13,
        *_AUTH,
        "a Ceph 20 (Tentacle) cluster also refuses legacy aes "
        "keys such as this one unless its monitors allow them",
    ),
}
# What each client release meets on each cluster release: (librbd's, the monitors').
EXPECTED = {(16, 16): CEPH16, (16, 20): CEPH20_FROM_CEPH16, (20, 20): CEPH20}


@pytest.fixture(scope="module")
def expected(cluster):
    releases = (rbd.RBD().version()[1], cluster.release())
    if releases not in EXPECTED:
        pytest.fail(
            f"no expectations for a Ceph {releases[0]} client on a Ceph {releases[1]} cluster"
        )
    return EXPECTED[releases]


def _words(expected, user, cluster, image):
    values = dict(
        entity=user.entity,
        keyring=user.keyring,
        pool=cluster.pool,
        image=image,
        caps=CAPS.format(pool=cluster.pool),
    )
    return [word.format(**values) for word in expected.words]


def _check_stock(outcome, expected, step=None):
    error = outcome.error
    assert isinstance(error, expected.stock), repr(error)
    if expected.at_connect:
        assert str(error) == "", "stock's BackendException says nothing"
    cause = error if isinstance(error, rbd.Error) else error.__context__
    assert isinstance(cause, (rados.Error, rbd.Error)), repr(cause)
    assert cause.errno == expected.errno, repr(cause)
    assert (step or expected.stock_step) in str(cause), repr(cause)


def _check_native(outcome, expected, words, operation=None):
    error = outcome.error
    # Stock's type: whatever glance, or anyone, catches of stock's catches native's too.
    assert isinstance(error, expected.stock), repr(error)
    message = str(error)
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    if operation:
        assert error.errno == expected.errno, repr(error)
        assert f"{operation} in pool" in message, message


def _threads():
    return len(os.listdir("/proc/self/task"))


@pytest.fixture
def good_user(cluster):
    return make_user(cluster, Case("good", glance_caps))


@pytest.fixture
def settled(cluster, clean_pool, good_user):
    """A native upload as glance's documented user done (its connection cached, every thread of
    the module started), and the connections and threads of the process counted after it; the
    test then checks that the same user still uploads."""
    glance_rbd_native.patch()
    name = new_name("cephx-good")
    assert upload(cluster, good_user, name).result == 3 * MiB
    clean_pool.remove(name)
    yield _native.connection_count(), _threads()
    name = new_name("cephx-good")
    assert upload(cluster, good_user, name).result == 3 * MiB, "the Store is usable again"
    clean_pool.remove(name)


@pytest.mark.parametrize("case", CASES)
def test_upload(cluster, clean_pool, case, expected):
    user = make_user(cluster, CASES[case])
    expected = expected[case]
    stock_name, native_name = new_name("cephx-stock"), new_name("cephx")
    glance_rbd_native.unpatch()
    threads = _threads()
    stock = upload(cluster, user, stock_name)
    stock_kept = _threads() - threads
    glance_rbd_native.patch()
    # The process's log thread, one per process, starts at its first native call: here, so that
    # what is counted is what the connect leaves.
    log_pump.start(green=False)
    connections, threads = _native.connection_count(), _threads()
    native = upload(cluster, user, native_name)
    if expected is None:
        assert (stock.result, native.result) == (3 * MiB, 3 * MiB), (stock, native)
        for name in (stock_name, native_name):
            clean_pool.remove(name)
        return
    _check_stock(stock, expected)
    operation = None if expected.at_connect else f"creating image '{native_name}'"
    _check_native(native, expected, _words(expected, user, cluster, native_name), operation)
    assert not {stock_name, native_name} & set(cluster.images())
    assert (_native.connection_count(), _threads()) == (connections, threads)
    # Stock does not shut down a client whose connect failed: its threads stay for the life of
    # the process.
    assert (stock_kept > 0) == expected.at_connect, stock_kept


@pytest.mark.parametrize("case", CASES)
def test_download(cluster, clean_pool, case, expected):
    user = make_user(cluster, CASES[case])
    expected = expected[case]
    name, uri = stored_image(cluster, clean_pool)
    glance_rbd_native.unpatch()
    stock = downloads(cluster, user, uri)
    glance_rbd_native.patch()
    log_pump.start(green=False)  # as in test_upload
    connections, threads = _native.connection_count(), _threads()
    native = downloads(cluster, user, uri)
    if expected is None:
        for outcome in (*stock.values(), *native.values()):
            assert outcome.ok, outcome
        assert native["get"].result == (MiB, MiB) == stock["get"].result
    else:
        for call in ("get_size", "get"):
            at_connect = expected.at_connect
            _check_stock(stock[call], expected, None if at_connect else "error opening image")
            operation = None if at_connect else f"opening image '{name}'"
            _check_native(native[call], expected, _words(expected, user, cluster, name), operation)
        assert (_native.connection_count(), _threads()) == (connections, threads)
    clean_pool.remove_snapshots(name)
    clean_pool.remove(name)


@pytest.mark.parametrize("case", CASES)
def test_command(cluster, tmp_path, case, expected):
    """`glance-rbd-native status` as the user: exit 1 with the same words as an upload's, or,
    for an operation refused, the pool, the user and the caps."""
    user = make_user(cluster, CASES[case])
    expected = expected[case]
    done = cli_as(cluster, user, tmp_path, "status")
    if expected is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 1, done
    if expected.at_connect:
        words = _words(expected, user, cluster, None)
    elif expected.stock is rbd.Timeout:
        words = [
            f"the cluster did not answer {user.entity} in pool '{cluster.pool}' in time",
            f"{user.entity} may have no osd cap on the pool",
            f"glance's cephx user needs the caps {CAPS.format(pool=cluster.pool)}",
        ]
    else:
        words = [
            f"the cluster refused {user.entity} in pool '{cluster.pool}'",
            f"glance's cephx user needs the caps {CAPS.format(pool=cluster.pool)}",
        ]
    for word in words:
        assert word in done.stderr, f"{word!r} not in {done.stderr!r}"


def test_caps_granted_after_a_refusal_apply_at_the_next_transfer(cluster, clean_pool, settled):
    """A connection keeps the caps of its cephx tickets: a refused one is not kept, so the caps
    the operator then grants apply at once, as with stock, which connects per call."""
    connections, threads = settled
    user = make_user(cluster, CASES["osd-cap-on-another-pool"], prefix="granted")
    name, uri = stored_image(cluster, clean_pool)
    refused = upload(cluster, user, new_name("cephx"))
    assert isinstance(refused.error, rbd.PermissionError), refused
    assert not downloads(cluster, user, uri)["get"].ok
    assert (_native.connection_count(), _threads()) == (connections, threads)
    cluster.user(user.id, **glance_caps(cluster.pool))
    stored = new_name("cephx")
    assert upload(cluster, user, stored).result == 3 * MiB
    assert downloads(cluster, user, uri)["get"].result == (MiB, MiB)
    assert _native.connection_count() == connections + 1
    for image in (stored, name):
        clean_pool.remove_snapshots(image)
        clean_pool.remove(image)
