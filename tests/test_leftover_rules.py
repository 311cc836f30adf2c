"""The rules of `glance-rbd-native status` and `sweep` as pure functions, without a cluster:
what a mark can be read as (`leftovers.index.parse`), what this host sees of a writer
(`leftovers.sight.look`, on a /proc made for the test), and the verdict (`leftovers.judge`).
The same rules on the real cluster, with real writers: tests/test_leftovers.py."""

import json
import os
from pathlib import Path

import pytest

from glance_rbd_native import leftovers
from glance_rbd_native.leftovers import index
from glance_rbd_native.leftovers.images import Header
from glance_rbd_native.leftovers.sight import INITIAL_PID_NAMESPACE, Host, Sight, look

BOOT = "5b2c7a66-6a5e-4bd4-9b47-0f4c4d3f1e11"
CONTAINER_NS = 4026532555
START = 1234567


def mark_fields(**changes):
    fields = {
        "host": "vm",
        "boot_id": BOOT,
        "pid": 1,
        "process_start": START,
        "pid_ns": CONTAINER_NS,
        "cgroup": "/system.slice/docker-abc.scope",
        "client": 4242,
        "addr": "10.0.0.1:0/99",
        "image_id": "1f2e3d",
        "started": 1000.0,
        "updated": 1000.0,
        "bytes": 0,
        "size": 0,
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v is not None}


def mark_of(**changes):
    return index.parse(b"img", json.dumps(mark_fields(**changes)).encode())


class FakeProc:
    """A /proc of processes given as {pid here: (pid namespace, pid in it, state, start)}."""

    def __init__(self, root, processes, me="10", hidepid=False):
        self.root = root
        (root / "sys/kernel/random").mkdir(parents=True)
        (root / "sys/kernel/random/boot_id").write_text(BOOT + "\n")
        for pid, (namespace, inner, state, start) in processes.items():
            self.process(pid, namespace, inner, state, start)
        (root / "self").symlink_to(me)
        options = "rw,hidepid=invisible" if hidepid else "rw"
        (root / me / "mountinfo").write_text(
            f"22 1 0:21 / {root} rw,nosuid - proc proc {options}\n"
        )

    def process(self, pid, namespace, inner, state, start):
        path = self.root / pid
        (path / "ns").mkdir(parents=True, exist_ok=True)
        # The namespace's inode stands for the nsfs one: a file per namespace, linked.
        target = self.root / f"ns-{namespace}"
        if not target.exists():
            target.write_text("")
        (path / "ns/pid").unlink(missing_ok=True)
        (path / "ns/pid").symlink_to(target)
        fields = ["S"] * 50
        fields[0], fields[19] = state, str(start)
        (path / "stat").write_text(f"{pid} (glance-api worker) {' '.join(fields)}\n")
        (path / "status").write_text(f"Name:\tx\nNSpid:\t{pid}\t{inner}\n")


class FakeHost(Host):
    """The fake /proc, as if this process were pid `me` in the namespace of its entry."""

    def __init__(self, fake, me="10", root_user=True):
        super().__init__(str(fake.root), hostname=lambda: "vm")
        self.fake, self.me, self.root_user = fake, me, root_user

    def pid_namespace(self, pid="self"):
        pid = self.me if pid == "self" else pid
        try:
            return int(os.readlink(f"{self.proc}/{pid}/ns/pid").rsplit("-", 1)[1])
        except OSError:
            return None

    def shows_own_namespace(self):
        return os.readlink(f"{self.proc}/self") == self.me

    def euid(self):
        return 0 if self.root_user else 1000


@pytest.fixture
def host_view(tmp_path):
    """From the host's namespace: the host's pid 10 (this command), and a container's glance-api
    worker, pid 1 in its namespace and 4321 here."""
    fake = FakeProc(
        tmp_path / "proc",
        {
            "10": (INITIAL_PID_NAMESPACE, 10, "R", 1),
            "4321": (CONTAINER_NS, 1, "S", START),
        },
    )
    return FakeHost(fake)


def test_a_writer_in_a_container_is_found_from_the_host_by_its_namespace(host_view):
    seen, why = look(mark_fields(), host_view)
    assert seen is Sight.RUNS and "pid 4321 here" in why


def test_a_frozen_writer_is_stopped_not_gone(host_view):
    host_view.fake.process("4321", CONTAINER_NS, 1, "T", START)  # overwritten: stopped
    assert look(mark_fields(), host_view)[0] is Sight.STOPPED


def test_a_pid_reused_in_the_namespace_is_not_the_writer(host_view):
    seen, why = look(mark_fields(process_start=START + 1), host_view)
    assert seen is Sight.GONE and "is gone" in why


def test_an_ended_container_seen_from_the_host_is_gone(host_view):
    seen, why = look(mark_fields(pid_ns=CONTAINER_NS + 7), host_view)
    assert seen is Sight.GONE and "has ended" in why


def test_from_inside_another_container_an_unknown_namespace_is_unseen(tmp_path):
    fake = FakeProc(tmp_path / "proc", {"1": (CONTAINER_NS + 1, 1, "R", 1)}, me="1")
    seen, why = look(mark_fields(), FakeHost(fake, me="1"))
    assert seen is Sight.UNSEEN and "cannot be seen" in why


def test_in_its_own_namespace_the_pid_decides(tmp_path):
    fake = FakeProc(
        tmp_path / "proc", {"1": (CONTAINER_NS, 1, "S", START), "10": (CONTAINER_NS, 10, "R", 1)}
    )
    host = FakeHost(fake)
    assert look(mark_fields(), host)[0] is Sight.RUNS
    assert look(mark_fields(pid=77), host)[0] is Sight.GONE


def test_what_cannot_be_proved_is_unseen(tmp_path, host_view):
    assert look(mark_fields(host="other"), host_view)[0] is Sight.UNSEEN
    assert look(mark_fields(boot_id="another-boot"), host_view)[0] is Sight.UNSEEN
    assert look(mark_fields(pid_ns=None), host_view)[0] is Sight.UNSEEN  # an older mark
    hidden = FakeProc(
        tmp_path / "hidden", {"10": (INITIAL_PID_NAMESPACE, 10, "R", 1)}, hidepid=True
    )
    seen, why = look(mark_fields(pid_ns=CONTAINER_NS + 7), FakeHost(hidden, root_user=False))
    assert seen is Sight.UNSEEN and "hides" in why
    # /proc of another namespace (unshare --pid without a /proc of its own).
    host_view.me = "4321"
    seen, why = look(mark_fields(), host_view)
    assert seen is Sight.UNSEEN and "not this pid namespace's" in why


def test_this_process_is_seen_as_running():
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
    fields = mark_fields(
        pid=os.getpid(),
        pid_ns=os.stat("/proc/self/ns/pid").st_ino,
        boot_id=boot,
        process_start=start,
    )
    host = Host(hostname=lambda: "vm")
    assert look(fields, host)[0] is Sight.RUNS


# -- the verdict -----------------------------------------------------------------------------

HEADER = Header("1f2e3d", (), None, 900.0, ())
WATCH = {"id": 4242, "addr": "10.0.0.1:0/99", "cookie": 1}
HOUR = 3600


def verdict(
    mark=None,
    header=HEADER,
    watchers=(),
    sight=(Sight.UNSEEN, "unseen"),
    now=1000.0 + 60,
    limit=HOUR,
):
    return leftovers.judge(mark or mark_of(), header, list(watchers), sight, now, limit)


def test_a_writer_seen_alive_is_never_gone_whatever_its_watch():
    for seen in (Sight.RUNS, Sight.STOPPED):
        state, reason, fence = verdict(sight=(seen, "pid 1 on vm"), now=1000.0 + 10 * HOUR)
        assert (state, fence) == ("alive", False) and "without a watch" in reason


def test_a_writer_seen_gone_is_gone_without_fencing():
    assert verdict(sight=(Sight.GONE, "gone"), watchers=[WATCH])[0::2] == ("gone", False)


def test_an_unseen_writer_is_alive_while_it_holds_its_watch():
    assert verdict(watchers=[WATCH], now=1000.0 + 10 * HOUR)[0] == "alive"
    # Another client's watch is not the writer's: silent past the limit, it is fenced first.
    other = dict(WATCH, id=7)
    state, reason, fence = verdict(watchers=[other], now=1000.0 + 10 * HOUR)
    assert (state, fence) == ("gone", True) and "fenced first" in reason


def test_a_leftover_its_writer_gave_up_is_gone_while_the_writer_runs_but_not_while_it_watches():
    given_up = mark_of(given_up=1030.0)
    for seen in (Sight.RUNS, Sight.UNSEEN):
        state, reason, fence = verdict(mark=given_up, sight=(seen, "pid 1 on vm"))
        assert (state, fence) == ("gone", False) and "gave up removing it" in reason
    state, _, fence = verdict(mark=given_up, watchers=[WATCH], sight=(Sight.RUNS, "pid 1 on vm"))
    assert (state, fence) == ("alive", False)
    assert verdict(mark=mark_of(given_up="soon"))[0] == "unreadable"


def test_an_unseen_silent_writer_is_kept_until_the_limit_then_fenced():
    state, reason, fence = verdict(now=1000.0 + HOUR - 1)
    assert (state, fence) == ("silent", False) and "presumed gone after 1h00m" in reason
    state, reason, fence = verdict(now=1000.0 + HOUR + 1)
    assert (state, fence) == ("gone", True) and "fenced first" in reason
    # A mark of an older release names no address: it cannot be fenced, so it stays.
    state, reason, fence = verdict(mark=mark_of(addr=None), now=1000.0 + 10 * HOUR)
    assert (state, fence) == ("silent", False) and "cannot be fenced" in reason


def test_finished_clones_missing_and_renamed_images_are_never_partial():
    assert verdict(header=Header("1f2e3d", ("snap",), None, 1.0, ()))[0] == "finished"
    assert verdict(header=Header("1f2e3d", (), "p/i@s", 1.0, ()))[0] == "finished"
    assert verdict(header=None)[0] == "missing"
    state, reason, _ = verdict(header=Header("9a9a9a", (), None, 1.0, ()))
    assert state == "missing" and "another image's" in reason


def test_the_snapshot_of_checks_probe_goes_with_it_and_no_other():
    """A probe of `check` (probes.py) names its own snapshot in its mark: an image holding that
    one alone is still partial; any other snapshot, or a mark without "probe", finishes it."""
    probe = mark_of(probe="check")
    gone = (Sight.GONE, "gone")
    assert (
        verdict(mark=probe, header=Header("1f2e3d", ("check",), None, 1.0, ()), sight=gone)[0]
        == "gone"
    )
    assert (
        verdict(mark=probe, header=Header("1f2e3d", ("check", "snap"), None, 1.0, ()), sight=gone)[
            0
        ]
        == "finished"
    )
    assert verdict(header=Header("1f2e3d", ("check",), None, 1.0, ()), sight=gone)[0] == "finished"
    assert verdict(mark=mark_of(probe=1))[0] == "unreadable"


# -- marks as read ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, problem",
    [
        (b"img", b"{not json", "not JSON"),
        (b"img", b"[1, 2]", "a JSON list, not an object"),
        (b"\xff\xfeimg", json.dumps(mark_fields()).encode(), "key is not UTF-8"),
        (b"im\x1b[2Jg", json.dumps(mark_fields()).encode(), "key holds control characters"),
        (
            b"img",
            json.dumps(mark_fields(host="vm\r\nFAKE LOG LINE")).encode(),
            "'host' holds control characters",
        ),
        (b"img", json.dumps(mark_fields(pid="1")).encode(), "'pid' is not a int"),
        (b"img", json.dumps({"host": "vm"}).encode(), "has no 'boot_id'"),
    ],
)
def test_a_malformed_mark_is_unreadable_and_printable(key, value, problem):
    mark = index.parse(key, value)
    assert mark.fields is None and problem in mark.problem
    assert not index.has_control(mark.image)
    state, reason, fence = verdict(mark=mark)
    assert (state, fence) == ("unreadable", False) and problem in reason


def test_a_readable_mark_keeps_what_was_stored():
    raw = json.dumps(mark_fields()).encode()
    mark = index.parse(b"img", raw)
    assert mark.problem is None and mark.raw == raw and mark.get("pid") == 1


def test_printable_escapes_control_characters_only():
    assert index.printable("abc-é") == "abc-é"
    assert index.printable("a\x1b[2J\nb") == "a\\x1b[2J\\nb"
