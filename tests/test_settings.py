"""The [glance_rbd_native] section of glance-api's configuration and the environment variables
that override it: the bound each transfer gets, what reaches the writer and the reader, the
log line that says it, the progress reports' interval and stall threshold, and what
oslo-config-generator lists."""

import io
import logging
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from glance_store import location
from glance_store._drivers import rbd as rbd_driver
from oslo_config import cfg

import glance_rbd_native
from glance_rbd_native import download, progress, settings, upload
from tests.harness.data import MiB, data_of, new_name
from tests.harness.stores import SNAP, make_store

DEFAULT = glance_rbd_native.DEFAULT_MAX_IN_FLIGHT
ENV = settings.MAX_IN_FLIGHT_ENV


PROGRESS = {
    "progress_interval": (
        settings.PROGRESS_INTERVAL_ENV,
        progress.DEFAULT_INTERVAL,
        settings.progress_interval,
    ),
    "stall_threshold": (
        settings.STALL_THRESHOLD_ENV,
        progress.DEFAULT_STALL_THRESHOLD,
        settings.stall_threshold,
    ),
}


@pytest.fixture(autouse=True)
def _no_environment(monkeypatch):
    for env in (ENV, settings.PROGRESS_INTERVAL_ENV, settings.STALL_THRESHOLD_ENV):
        monkeypatch.delenv(env, raising=False)
    # Each test sees the bound logged afresh.
    monkeypatch.setattr(settings, "_logged", None)


def glance_conf(tmp_path, section="[glance_rbd_native]\nmax_in_flight_mib = 16\n", conf=None):
    """`conf` (a new ConfigOpts if None) parsed from a glance-api.conf holding `section`."""
    path = tmp_path / "glance-api.conf"
    path.write_text("[DEFAULT]\ndebug = false\n" + section)
    conf = conf or cfg.ConfigOpts()
    conf(args=[], default_config_files=[str(path)])
    return conf


def test_default_without_the_section(tmp_path):
    assert settings.max_in_flight() == DEFAULT
    assert settings.max_in_flight(glance_conf(tmp_path, section="")) == DEFAULT
    assert settings.OPTS[0].default << 20 == DEFAULT


def test_an_override_on_one_configuration_stays_there(tmp_path):
    """oslo.config copies a registered group shallowly: sharing one group object between
    configurations would share their overrides."""
    overridden, other = glance_conf(tmp_path), cfg.ConfigOpts()
    other(args=[])
    settings.register_opts(overridden)
    overridden.set_override("max_in_flight_mib", 24, group=settings.GROUP.name)
    assert settings.max_in_flight(overridden) == 24 * MiB
    assert settings.max_in_flight(other) == DEFAULT


def test_option_from_the_file(tmp_path):
    conf = glance_conf(tmp_path)
    assert settings.max_in_flight(conf) == 16 * MiB
    # Registering again, as glance or another store may, changes nothing.
    settings.register_opts(conf)
    assert settings.max_in_flight(conf) == 16 * MiB
    assert conf.glance_rbd_native.max_in_flight_mib == 16


def test_environment_overrides_the_file(tmp_path, monkeypatch):
    conf = glance_conf(tmp_path)
    monkeypatch.setenv(ENV, " 8 ")
    assert settings.max_in_flight(conf) == 8 * MiB


@pytest.mark.parametrize("value", ["lots", "0", "-3", "1.5"])
def test_invalid_environment_falls_back_to_the_file(tmp_path, monkeypatch, caplog, value):
    conf = glance_conf(tmp_path)
    monkeypatch.setenv(ENV, value)
    with caplog.at_level(logging.WARNING, logger="glance_rbd_native"):
        assert settings.max_in_flight(conf) == 16 * MiB
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == (
        f"{ENV}={value!r} is not a positive integer; using "
        "[glance_rbd_native] max_in_flight_mib, 16 MiB"
    )


@pytest.mark.parametrize("value", ["0", "many"])
def test_invalid_file_value_falls_back_to_the_default(tmp_path, caplog, value):
    conf = glance_conf(tmp_path, section=f"[glance_rbd_native]\nmax_in_flight_mib = {value}\n")
    with caplog.at_level(logging.WARNING, logger="glance_rbd_native"):
        assert settings.max_in_flight(conf) == DEFAULT
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith("[glance_rbd_native] max_in_flight_mib: ")
    assert warning.getMessage().endswith(f"; using the default, {DEFAULT >> 20} MiB")


def test_the_bound_is_logged_at_the_first_transfer_and_when_it_changes(
    tmp_path, monkeypatch, caplog
):
    conf = glance_conf(tmp_path)
    with caplog.at_level(logging.INFO, logger="glance_rbd_native"):
        glance_rbd_native.patch()
        for _ in range(3):
            settings.max_in_flight(conf)
        monkeypatch.setenv(ENV, "8")
        settings.max_in_flight(conf)
        settings.max_in_flight(conf)
    messages = [r.getMessage() for r in caplog.records]
    # At patch time glance may not have read its configuration: that line names no bound.
    active = [m for m in messages if "native RBD writer is active for glance_store" in m]
    assert len(active) == 1 and "MiB" not in active[0]
    assert [m for m in messages if "MiB in flight" in m] == [
        "glance-rbd-native: 16 MiB in flight, shared by all uploads and downloads of this "
        "process ([glance_rbd_native] max_in_flight_mib)",
        f"glance-rbd-native: 8 MiB in flight, shared by all uploads and downloads of this "
        f"process ({ENV})",
    ]


@pytest.mark.parametrize("name", PROGRESS)
def test_progress_settings_from_the_file_and_the_environment(tmp_path, monkeypatch, name):
    env, default, read = PROGRESS[name]
    assert default == {"progress_interval": 30, "stall_threshold": 60}[name]
    assert read() == default
    assert read(glance_conf(tmp_path, section="")) == default
    conf = glance_conf(tmp_path, section=f"[glance_rbd_native]\n{name} = 5\n")
    assert read(conf) == 5
    assert conf.glance_rbd_native[name] == 5
    monkeypatch.setenv(env, " 0 ")  # 0 turns them off
    assert read(conf) == 0


@pytest.mark.parametrize("value", ["soon", "-1", "1.5"])
@pytest.mark.parametrize("name", PROGRESS)
def test_invalid_progress_environment_falls_back_to_the_file(
    tmp_path, monkeypatch, caplog, name, value
):
    env, _, read = PROGRESS[name]
    conf = glance_conf(tmp_path, section=f"[glance_rbd_native]\n{name} = 5\n")
    monkeypatch.setenv(env, value)
    with caplog.at_level(logging.WARNING, logger="glance_rbd_native"):
        assert read(conf) == 5
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == (
        f"{env}={value!r} is not a number of seconds (0 or more); "
        f"using [glance_rbd_native] {name}, 5 s"
    )


@pytest.mark.parametrize("value", ["-1", "often"])
@pytest.mark.parametrize("name", PROGRESS)
def test_invalid_progress_file_value_falls_back_to_the_default(tmp_path, caplog, name, value):
    _, default, read = PROGRESS[name]
    conf = glance_conf(tmp_path, section=f"[glance_rbd_native]\n{name} = {value}\n")
    with caplog.at_level(logging.WARNING, logger="glance_rbd_native"):
        assert read(conf) == default
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage().startswith(f"[glance_rbd_native] {name}: ")
    assert warning.getMessage().endswith(f"; using the default, {default} s")


def test_each_transfer_hands_the_progress_settings_to_the_reporter(tmp_path, monkeypatch):
    """settings.apply, which every upload and download calls first."""
    monkeypatch.setattr(progress, "_interval", progress.DEFAULT_INTERVAL)
    monkeypatch.setattr(progress, "_stall_threshold", progress.DEFAULT_STALL_THRESHOLD)
    conf = glance_conf(
        tmp_path, section="[glance_rbd_native]\nprogress_interval = 7\nstall_threshold = 0\n"
    )
    settings.apply(conf)
    assert (progress._interval, progress._stall_threshold) == (7, 0)
    monkeypatch.setenv(settings.STALL_THRESHOLD_ENV, "9")
    settings.apply(conf)
    assert (progress._interval, progress._stall_threshold) == (7, 9)
    settings.apply()
    assert (progress._interval, progress._stall_threshold) == (30, 9)


def recording(monkeypatch, module, name):
    """Replaces `module.name` (RbdWriter or RbdReader) by a wrapper that records the keyword
    arguments of each one made."""
    made = []
    cls = getattr(module, name)

    def make(*args, **kwargs):
        made.append(kwargs)
        return cls(*args, **kwargs)

    monkeypatch.setattr(module, name, make)
    return made


@pytest.mark.cluster
@pytest.mark.parametrize("env,expected", [(None, 16), ("8", 8), ("lots", 16)])
def test_the_bound_reaches_the_process_at_each_transfer(
    cluster, clean_pool, tmp_path, monkeypatch, env, expected
):
    """glance's configuration parsed after the patch, as when the switch patches on import of
    the driver: each upload and download reads it, and sets the process's bound; the writer
    and the reader get no bound of their own."""
    if env is not None:
        monkeypatch.setenv(ENV, env)
    writers = recording(monkeypatch, upload, "RbdWriter")
    readers = recording(monkeypatch, download, "RbdReader")
    assert glance_rbd_native.patch()
    glance_rbd_native.set_max_in_flight(3 * MiB)
    store = make_store(cluster, chunk_mib=1)
    glance_conf(tmp_path, conf=store.conf)
    data = data_of(3 * MiB, seed=expected)
    name = new_name("settings")
    try:
        store.add(name, io.BytesIO(data), len(data), "sha256")
        uri = f"rbd://{cluster.fsid}/{cluster.pool}/{name}/{SNAP}"
        loc = location.Location("rbd", rbd_driver.StoreLocation, store.conf, uri=uri)
        assert glance_rbd_native.in_flight()["bound"] == expected * MiB
        glance_rbd_native.set_max_in_flight(3 * MiB)
        chunks, size = store.get(loc)
        assert size == len(data) and b"".join(chunks) == data
        assert glance_rbd_native.in_flight()["bound"] == expected * MiB
    finally:
        clean_pool.remove(name)
        glance_rbd_native.set_max_in_flight(DEFAULT)
    assert len(writers) == len(readers) == 1
    assert "max_in_flight" not in writers[0] and "max_in_flight" not in readers[0]


def test_config_generator_lists_the_section():
    [entry] = [
        e for e in metadata.entry_points(group="oslo.config.opts") if e.name == "glance_rbd_native"
    ]
    assert entry.load() is settings.list_opts
    generator = Path(sys.executable).parent / "oslo-config-generator"
    out = subprocess.run(
        [str(generator), "--namespace", "glance_rbd_native"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    lines = out.splitlines()
    section = lines[lines.index("[glance_rbd_native]") :]
    assert "#max_in_flight_mib = 64" in section
    assert "# Minimum value: 1" in section
    assert "#progress_interval = 30" in section
    assert "#stall_threshold = 60" in section
    assert section.count("# Minimum value: 0") == 2
    assert "#presume_gone_after = 3600" in section
    assert "# Minimum value: 60" in section
    # Help text is wrapped (also after a hyphen): compare it unwrapped.
    text = " ".join(line.lstrip("# ") for line in section if line.startswith("#"))
    bare = "".join(text.split())
    assert settings.GROUP.help in text
    assert all("".join(opt.help.split()) in bare for opt in settings.OPTS)
    assert "GLANCE_RBD_NATIVE=1, is an environment variable only" in text
    assert f"The environment variable {ENV}, when set, overrides it." in text
    for env, _, _ in PROGRESS.values():
        assert f"variable {env}, when set, overrides it." in text
