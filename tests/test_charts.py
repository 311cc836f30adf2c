"""make bench's charts (benchmarks/charts.py) from results files made here, no cluster: the
samples each chart reads, the PNGs written, and a chart whose input is missing skipped."""

import json
import sys

import matplotlib  # make deps installs it (pyproject.toml's test group): a plain import
import pytest

from benchmarks import charts

GiB = 1 << 30
PNG = b"\x89PNG\r\n\x1a\n"


def results(*, delete=False, rss=False, groups=tuple(charts.ALL_GROUPS)):
    """A run's results as bench.py writes them: rounds of one-image samples at the run's size,
    a group measured once at 4 GiB, and samples the time chart leaves out."""
    samples = {
        # Rounds at the run's size, named as bench.py names them.
        "stock known": [{"driver": "stock", "seconds": s, "bytes": GiB} for s in (10, 12, 11)],
        "native known": [{"driver": "native", "seconds": s, "bytes": GiB} for s in (4, 5, 6)],
        "read stock": [{"driver": "stock", "seconds": 4, "bytes": GiB, "size": GiB}],
        "read native": [{"driver": "native", "seconds": 2, "bytes": GiB, "size": GiB}],
        # Not one image's time per size: no driver, no operation, many images at once.
        "rbd import": [{"seconds": 3}],
        "hub native": [{"upload_p99_ms": 300}],
        "4 uploads at once native": [
            {"driver": "native", "transfers": 4, "size": GiB // 4, "seconds": 3}
        ],
        # A group measured once, at its own size; its samples have no size of their own.
        f"huge {4 * GiB}": {
            "size": 4 * GiB,
            "direct upload native": {"seconds": 16},
            "direct upload stock": {"seconds": 40},
            "direct read native": {"seconds": 8},
            "direct read stock": {"seconds": 16},
        },
    }
    if delete:
        samples["delete native"] = [{"seconds": s} for s in (0.1, 0.3, 0.2)]
        samples["delete stock"] = [{"seconds": s} for s in (1.0, 1.2, 1.1)]
        samples[f"huge {4 * GiB}"]["direct delete native"] = {"seconds": 0.2}
        samples[f"huge {4 * GiB}"]["direct delete stock"] = {"seconds": 4.0}
    run = {
        "rounds": 3,
        "size": GiB,
        "groups": list(groups),
        "machine": "2 cores, x86_64, Ceph 16.2, bluestore on a file",
        "commit": "abc1234",
        "rows": [{"case": "local, known size", "measured": "...", "target": "", "met": None}],
        "samples": samples,
    }
    if rss:
        run["rss_series"] = {
            "bound_mib": 64,
            "upload native": [[0.0, 0.0], [0.5, 70.0], [1.0, 81.0], [1.5, 80.0]],
            "upload stock": [[0.0, 0.0], [0.5, 20.0], [1.0, 26.0], [2.5, 25.0]],
            "read native": [[0.0, 0.0], [0.4, 79.0]],
        }
    return run


def write(path, run):
    path.write_text(json.dumps(run, indent=1))
    return path


def test_the_samples_drawn_per_size():
    points = charts.size_points(results(delete=True))
    assert points == {
        "upload": {
            ("direct upload", "native"): {4 * GiB: 16},
            ("direct upload", "stock"): {4 * GiB: 40},
            ("known", "native"): {GiB: 5},
            ("known", "stock"): {GiB: 11},
        },
        "read": {
            ("direct read", "native"): {4 * GiB: 8},
            ("direct read", "stock"): {4 * GiB: 16},
            ("read", "native"): {GiB: 2},
            ("read", "stock"): {GiB: 4},
        },
        # Without a size of their own: the run's, and the group's.
        "delete": {
            ("delete", "native"): {GiB: 0.2},
            ("delete", "stock"): {GiB: 1.1},
            ("direct delete", "native"): {4 * GiB: 0.2},
            ("direct delete", "stock"): {4 * GiB: 4.0},
        },
    }
    assert "delete" not in charts.size_points(results())


@pytest.mark.parametrize(
    "name,parsed",
    [
        ("native big unknown", ("upload", "unknown", "native")),
        ("hashing read stock", ("read", "hashing read", "stock")),
        ("api download native", ("read", "api download", "native")),
        ("delete stock", ("delete", "delete", "stock")),
        ("16 deletes at once native", ("delete", "16 deletes at once", "native")),
        ("read rbd export", None),
        ("latency native", None),
        ("native stock upload", None),
    ],
)
def test_sample_names(name, parsed):
    assert charts.parse(name) == parsed


@pytest.mark.parametrize("delete", [False, True], ids=["no-delete", "delete"])
@pytest.mark.parametrize("rss", [False, True], ids=["no-rss", "rss"])
def test_the_charts_are_pngs(tmp_path, delete, rss):
    source = write(tmp_path / "2026-12-24.json", results(delete=delete, rss=rss))
    out = tmp_path / "images"
    drawn = charts.draw(source, out)
    expected = {"time-per-size": out / "2026-12-24-time-per-size.png"}
    expected["rss"] = out / "2026-12-24-rss.png" if rss else None
    assert drawn == expected
    written = sorted(out.iterdir())
    assert written == sorted(path for path in expected.values() if path)
    for path in written:
        assert path.read_bytes().startswith(PNG), path


def test_a_chart_without_its_input_is_skipped(tmp_path, capsys):
    """No RSS series: no rss chart, and one made before from the same name is gone. No sample
    drawn per size: no time chart. Neither is an error."""
    source = write(tmp_path / "run.json", results(rss=True))
    assert charts.draw(source)["rss"] == tmp_path / "run-rss.png"
    write(source, results())
    charts.main([str(source)])
    assert not (tmp_path / "run-rss.png").exists()
    assert (tmp_path / "run-time-per-size.png").read_bytes().startswith(PNG)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"chart time-per-size: {tmp_path / 'run-time-per-size.png'}",
        "chart rss: skipped, the results hold no RSS series (rss_series)",
    ]

    bare = results()
    bare["samples"] = {"hub native": bare["samples"]["hub native"]}
    assert charts.draw(write(tmp_path / "bare.json", bare), tmp_path / "bare") == {
        "time-per-size": None,
        "rss": None,
    }
    assert not (tmp_path / "bare").exists() or not any((tmp_path / "bare").iterdir())


def test_the_footnote_names_the_command_the_file_and_the_commit(tmp_path):
    note = charts.footnote(results(), tmp_path / "2026-12-24.json")
    assert note.splitlines()[0] == f"make bench: {tmp_path / '2026-12-24.json'}, commit abc1234"
    scale = charts.footnote(results(groups=["scale"]), charts.CHECKOUT / "benchmarks/x.json")
    assert scale.startswith("BENCH_ONLY=scale make bench: benchmarks/x.json, commit abc1234")
    old = results()
    del old["commit"], old["groups"]
    assert ", commit not recorded\n" in charts.footnote(old, tmp_path / "old.json")


def test_bench_goes_on_without_matplotlib(tmp_path, capsys, monkeypatch):
    """bench.py's last step: without matplotlib, one line, no chart, and the results kept."""
    source = write(tmp_path / "results.json", results(rss=True))
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    charts.after_run(source)
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1
    assert out[0].startswith("no charts: matplotlib is not importable")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["results.json"]
    monkeypatch.setitem(sys.modules, "matplotlib", matplotlib)
    charts.after_run(source)
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "results-rss.png",
        "results-time-per-size.png",
        "results.json",
    ]
