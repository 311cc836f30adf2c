"""Charts of one `make bench` run, drawn from its results file as PNG, headless (matplotlib's Agg).

    python -m benchmarks.charts benchmarks/results/2026-12-01.json --out docs/images/

writes OUT/<stem>-<chart>.png for each chart whose input the results hold (OUT: by default the
results file's folder) and says which it skipped; `make bench` draws them next to its results.
matplotlib is a development dependency (pyproject.toml's test group, which `make deps`
installs), never the package's: it is imported only to draw, so that bench.py goes on without.

The charts, and what each reads of the results:

time-per-size: median seconds per image size, stock against native, one panel per operation
  present (upload, read, delete). From results["samples"]: a sample's name -> the list of its
  rounds, a dict each with "seconds"; or a group measured once, a dict of the image "size"
  and samples by name -> one dict each ("huge 10737418240": {"size": 10737418240, "direct
  upload native": {"seconds": ...}, ...}). A sample is drawn when the words of its name hold
    - one driver: "native" or "stock";
    - one operation: "upload", "read" or "download" (both drawn as read), "delete", or their
      plurals; "known" and "unknown" (the size glance gives) name uploads ("native known").
  The name's other words are the case, one line per case and driver ("hashing read native"
  and "hashing read stock": case "hashing read"); "big" is a size, not a case ("native big
  unknown" is "unknown" at its own size). Not drawn: names without one driver and one
  operation ("rbd import", "4 threads native", "hub native"), and samples of more than one
  image ("transfers" > 1). The size of a sample: its "size", else its "bytes", else its
  group's "size", else the run's results["size"]. So delete samples are drawn when named
  like the others, e.g. "delete native" and "delete stock", rounds of {"seconds": s} (at
  results["size"]; or with their own "size"), and "direct delete native" in a group.

rss: RSS over time, one panel per case with both drivers, the in-flight bound a horizontal
  line. From results["rss_series"], optional (the chart is skipped without it):
    {"bound_mib": 64, "<case> <driver>": [[seconds, rss_mib], ...], ...}
  seconds since the transfer started; rss_mib the process's RSS over its baseline before the
  transfer, in MiB (as the tables' peaks are); "bound_mib" optional.

Each chart's footnote names the command of the run ("make bench", after BENCH_ONLY= when the
results' "groups" are not all of them), the results file, and results["commit"], the commit
bench.py ran from (`git rev-parse --short HEAD`; "not recorded" in runs made before it was).
"""

import argparse
import json
import pathlib
import statistics
import sys
from collections import defaultdict

CHECKOUT = pathlib.Path(__file__).resolve().parents[1]

MiB, GiB = 1 << 20, 1 << 30
DRIVERS = ("stock", "native")
COLORS = {"stock": "tab:orange", "native": "tab:blue", None: "tab:gray"}
# The words of a sample's name that say its operation, and the panel each is drawn in.
OPERATIONS = {
    "upload": "upload",
    "uploads": "upload",
    "known": "upload",
    "unknown": "upload",
    "read": "read",
    "reads": "read",
    "download": "read",
    "downloads": "read",
    "delete": "delete",
    "deletes": "delete",
}
PANELS = {"upload": "upload", "read": "read (download)", "delete": "delete"}
# Words that name an image size, which the sample itself gives.
SIZE_WORDS = {"big"}
# bench.py's groups of rows when BENCH_ONLY is not set.
ALL_GROUPS = ["transfers", "scale", "huge", "deletes"]
MARKERS = "osD^v<>p*"
LINES = ("-", "--", "-.", ":")


# -- what the results hold -------------------------------------------------------------------


def parse(name):
    """(operation, case, driver) of a sample's name, or None when it is not drawn per size."""
    words = name.split()
    drivers = [word for word in words if word in DRIVERS]
    operations = {OPERATIONS[word] for word in words if word in OPERATIONS}
    if len(drivers) != 1 or len(operations) != 1:
        return None
    case = " ".join(word for word in words if word not in DRIVERS and word not in SIZE_WORDS)
    return operations.pop(), case, drivers[0]


def size_points(results):
    """{operation: {(case, driver): {size in bytes: median seconds}}} of the samples drawn."""
    seconds = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))

    def add(name, rounds, default_size):
        parsed = parse(name)
        if parsed is None:
            return
        operation, case, driver = parsed
        for sample in rounds:
            if not isinstance(sample, dict) or not isinstance(sample.get("seconds"), int | float):
                continue
            if (sample.get("transfers") or 1) > 1:
                continue
            size = sample.get("size") or sample.get("bytes") or default_size
            if size:
                seconds[operation][case, driver][size].append(sample["seconds"])

    run_size = results.get("size")
    for name, value in results.get("samples", {}).items():
        if isinstance(value, list):
            add(name, value, run_size)
        elif isinstance(value, dict) and "seconds" in value:
            add(name, [value], run_size)
        elif isinstance(value, dict):
            for inner, sample in value.items():
                add(inner, [sample], value.get("size") or run_size)
    return {
        operation: {
            key: {size: statistics.median(times) for size, times in sorted(by_size.items())}
            for key, by_size in sorted(lines.items())
        }
        for operation, lines in seconds.items()
    }


def rss_series(results):
    """(bound in MiB or None, {case: {driver: [[seconds, rss_mib], ...]}}) of the results."""
    raw = dict(results.get("rss_series") or {})
    bound = raw.pop("bound_mib", None)
    series = defaultdict(dict)
    for name, points in sorted(raw.items()):
        if not isinstance(points, list) or not points:
            continue
        words = name.split()
        drivers = [word for word in words if word in DRIVERS]
        driver = drivers[0] if len(drivers) == 1 else None
        case = " ".join(word for word in words if word != driver) or name
        series[case][driver] = points
    return bound, dict(series)


def source_name(path):
    """The results file as the footnote names it: from the checkout's root when inside it."""
    path = pathlib.Path(path)
    try:
        return str(path.resolve().relative_to(CHECKOUT))
    except ValueError:
        return str(path)


def footnote(results, source):
    """The command, results file and commit of the run, and what it measured."""
    groups = results.get("groups")
    command = "make bench"
    if groups and sorted(groups) != sorted(ALL_GROUPS):
        command = f"BENCH_ONLY={','.join(groups)} make bench"
    commit = results.get("commit") or "not recorded"
    details = [f"{results['rounds']} rounds"] if results.get("rounds") else []
    details += (
        [f"the run's image size {size_label(results['size'])}"] if results.get("size") else []
    )
    details += [results["machine"]] if results.get("machine") else []
    return f"{command}: {source_name(source)}, commit {commit}\n" + "; ".join(details)


def size_label(size):
    if size % GiB == 0:
        return f"{size // GiB} GiB"
    return f"{size / MiB:g} MiB"


# -- drawing ---------------------------------------------------------------------------------


def figure(panels, *, width=5.6, height=4.6, columns=3):
    """A figure of `panels` axes on Agg, no display needed, and its axes in order."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    columns = min(columns, panels)
    rows = -(-panels // columns)
    fig = Figure(figsize=(width * columns, height * rows + 0.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, columns, squeeze=False).flatten()
    for unused in axes[panels:]:
        unused.set_visible(False)
    return fig, axes[:panels]


def finish(fig, title, note, path):
    fig.suptitle(title)
    fig.text(0.01, 0.01, note, fontsize=8, ha="left", va="bottom", color="dimgray")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(path, dpi=100)


def draw_time_per_size(points, note, path):
    from matplotlib.ticker import LogFormatter, NullLocator

    operations = [operation for operation in PANELS if operation in points]
    fig, axes = figure(len(operations))
    for ax, operation in zip(axes, operations, strict=True):
        lines = points[operation]
        cases = sorted({case for case, _ in lines})
        sizes = sorted({size for by_size in lines.values() for size in by_size})
        for (case, driver), by_size in lines.items():
            style = cases.index(case)
            ax.plot(
                list(by_size),
                list(by_size.values()),
                color=COLORS[driver],
                marker=MARKERS[style % len(MARKERS)],
                linestyle=LINES[style % len(LINES)],
                label=f"{case}, {driver}",
            )
        if sizes[-1] / sizes[0] >= 10:
            ax.set_xscale("log")
            ax.set_yscale("log")
            # Seconds as numbers (20, 30, 60), not powers of ten.
            ax.yaxis.set_major_formatter(LogFormatter())
            ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
            ax.set_xlim(sizes[0] / 1.6, sizes[-1] * 1.6)
        else:
            ax.set_xlim(0, sizes[-1] * 1.25)
            ax.set_ylim(bottom=0)
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(sizes, [size_label(size) for size in sizes])
        ax.set_title(PANELS[operation])
        ax.set_xlabel("image size")
        ax.set_ylabel("seconds (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    finish(fig, "Time per image size: stock against native", note, path)


def draw_rss(bound, series, note, path):
    fig, axes = figure(len(series), columns=2)
    for ax, (case, drivers) in zip(axes, series.items(), strict=True):
        for driver, points in drivers.items():
            seconds, mib = zip(*points, strict=True)
            ax.plot(seconds, mib, color=COLORS[driver], label=driver or case)
        if bound is not None:
            ax.axhline(
                bound, color="tab:red", linestyle="--", label=f"in-flight bound, {bound:g} MiB"
            )
        ax.set_ylim(bottom=0)
        ax.set_title(case)
        ax.set_xlabel("seconds since the transfer started")
        ax.set_ylabel("RSS over the baseline (MiB)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    finish(fig, "RSS over time: stock against native", note, path)


def draw(results_path, out_dir=None):
    """Draws each chart whose input the results file holds into out_dir (default: the results'
    folder) as <stem>-<chart>.png. Returns {chart: the path written, or None when skipped}; a
    chart skipped leaves no file of that name. Raises ImportError without matplotlib."""
    import matplotlib  # noqa: F401  (first: ImportError here, before anything is drawn)

    results_path = pathlib.Path(results_path)
    results = json.loads(results_path.read_text())
    out_dir = pathlib.Path(out_dir) if out_dir is not None else results_path.parent
    out_dir.mkdir(parents=True, exist_ok=True)
    note = footnote(results, results_path)
    points = size_points(results)
    bound, series = rss_series(results)
    drawers = {
        "time-per-size": (lambda path: draw_time_per_size(points, note, path)) if points else None,
        "rss": (lambda path: draw_rss(bound, series, note, path)) if series else None,
    }
    drawn = {}
    for chart, drawer in drawers.items():
        path = out_dir / f"{results_path.stem}-{chart}.png"
        if drawer is None:
            path.unlink(missing_ok=True)
            drawn[chart] = None
        else:
            drawer(path)
            drawn[chart] = path
    return drawn


def report(drawn):
    for chart, path in drawn.items():
        if path is None:
            why = "no RSS series (rss_series)" if chart == "rss" else "no sample drawn per size"
            print(f"chart {chart}: skipped, the results hold {why}")
        else:
            print(f"chart {chart}: {path}")


def after_run(results_path):
    """bench.py's last step: the charts next to its results, or one line saying why not."""
    try:
        drawn = draw(results_path)
    except ImportError as error:
        print(f"no charts: matplotlib is not importable ({error}); `make deps` installs it")
        return
    report(drawn)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("results", type=pathlib.Path, help="a results file of make bench")
    parser.add_argument(
        "--out", type=pathlib.Path, help="where the PNGs go (default: the results file's folder)"
    )
    args = parser.parse_args(argv)
    report(draw(args.results, args.out))


if __name__ == "__main__":
    sys.exit(main())
