"""The --plot figures: real PNG files of the expected pixel size, written atomically, with
stalled results drawn rather than dropped and each policy in its fixed colour.

One tiny real analysis (32 GPUs, 2 planes, radix 8; a permutation and a ring all-reduce under
ecmp, spray and mrc, with trace and four failure sets of two dead links) feeds every fast test;
the other reports are `dataclasses.replace` variants of it (stalled, no trace, no failures,
hand-made sharing rows). A real two-job analysis runs in the slow tier only.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import matplotlib.colors
import pytest
from matplotlib.figure import Figure
from matplotlib.text import Text

from fabricjax.policies import get
from fabricjax.report import plots
from fabricjax.results import SharingRow
from fabricjax.study.analyze import analyze
from fabricjax.scenario import parse_scenario

TINY_FABRIC = {"gpus": 32, "planes": 2, "radix": 8}
TINY_WORKLOAD = [
    {"name": "permutation", "collective": "permutation", "size": "1MiB"},
    {"name": "ring", "collective": "all-reduce", "algorithm": "ring", "size": "4MiB"},
]
POLICIES = ["ecmp", "spray", "mrc"]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SMALL = (1200, 750)       # 8 x 5 in at 150 dpi


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) from the IHDR chunk, which a valid PNG has right after its magic."""
    head = Path(path).read_bytes()[:24]
    assert head[:8] == PNG_MAGIC and head[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", head[16:24])


def assert_png(path: Path, size: tuple[int, int] = SMALL) -> None:
    path = Path(path)
    assert path.is_file()
    assert path.stat().st_size > 5_000, "a figure with axes, lines and text is several KB"
    assert png_size(path) == size


def no_temp_files(folder: Path) -> bool:
    return not [p for p in folder.iterdir() if p.name.startswith(".") or
                p.suffix == ".tmp"]


@pytest.fixture(scope="module")
def report():
    """The tiny analysis, with trace and a failure study (about 10 s: one compile per shape)."""
    scenario = parse_scenario({"name": "tiny", "fabric": TINY_FABRIC,
                               "workload": TINY_WORKLOAD, "policies": POLICIES,
                               "failures": {"links": {"random": 2}, "samples": 4}})
    return analyze(scenario, trace=True)


@pytest.fixture(scope="module")
def traced(report):
    """The tiny analysis with an mrc that iterated: on 32 GPUs its initial slots are already
    balanced (zero iterations, a one-point trace), so the trace here is made up: 1.5 at the
    start, the best 1.0 at iteration 2."""
    return dataclasses.replace(report, records=[
        dataclasses.replace(r, trace=[1.5, 1.25, 1.0, 1.25], iterations=3)
        if r.policy == "mrc" else r for r in report.records])


def sharing_rows() -> list[SharingRow]:
    rows = []
    for policy in POLICIES:
        for job, gpus, alone, together in (("train", 16, 3e-4, 4e-4), ("moe", 8, 2e-4, None)):
            slowdown = together / alone if together is not None else None
            rows.append(SharingRow(policy, job, gpus, alone, together, slowdown, mixes=2))
    return rows


@pytest.fixture
def figures(monkeypatch):
    """Every Figure handed to `plots._save`, so a test can look inside what was drawn."""
    seen: list[Figure] = []
    save = plots._save

    def keep(fig, path):
        seen.append(fig)
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    return seen


def texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text)]


def visible_axes(fig: Figure) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


# --------------------------------------------------------------------------- report figures

def test_write_plots_writes_every_report_figure(traced, tmp_path):
    folder = tmp_path / "nested" / "plots"          # created on demand
    full = dataclasses.replace(traced, sharing=sharing_rows())
    paths = plots.write_plots(full, folder)
    names = ["utilisation_cdf.png", "completion.png", "mrc_trace.png", "sharing.png"]
    assert [p.name for p in paths] == names
    for path in paths:
        assert path.parent == folder
        assert_png(path)
    assert sorted(p.name for p in folder.iterdir()) == sorted(names)    # no temp file left
    # rewriting over existing files works and gives the same names
    assert [p.name for p in plots.write_plots(full, folder)] == names
    assert no_temp_files(folder)


def test_figures_skip_what_the_report_lacks(report, tmp_path):
    """No mrc trace: no mrc_trace.png; no sharing rows: no sharing.png; no failure study:
    the completion figure still renders."""
    plain = dataclasses.replace(
        report, failures=None, records=[dataclasses.replace(r, trace=None)
                                        for r in report.records])
    assert plots.plot_mrc_trace(plain, tmp_path / "mrc_trace.png") is None
    assert plots.plot_sharing(plain, tmp_path / "sharing.png") is None
    assert not any(tmp_path.iterdir())
    paths = plots.write_plots(plain, tmp_path)
    assert [p.name for p in paths] == ["utilisation_cdf.png", "completion.png"]
    for path in paths:
        assert_png(path)


def test_policies_keep_their_colours_across_figures(report, tmp_path, figures):
    plots.plot_utilisation_cdf(report, tmp_path / "cdf.png")
    plots.plot_completion(report, tmp_path / "completion.png")
    cdf, completion = figures
    lines = [line for ax in cdf.axes for line in ax.get_lines()
             if line.get_label().split(" ")[0] in POLICIES]
    assert len(lines) == len(POLICIES) * len(plots.cdf_panels(report))
    for line in lines:
        policy = line.get_label().split(" ")[0]
        assert matplotlib.colors.same_color(line.get_color(), get(policy).display.colour)
    for ax in completion.axes:
        bars = [p for p in ax.patches if p.get_height() > 0]
        assert len(bars) == len(POLICIES)
        for bar, policy in zip(bars, POLICIES):
            assert matplotlib.colors.same_color(bar.get_facecolor(),
                                                get(policy).display.colour)
    assert any("\n×" in t for t in texts(completion))    # value and slowdown labels


def test_completion_names_line_rate_and_endpoint_bound(report, tmp_path, figures):
    """An incast: 32x slower than line rate, but the fabric adds nothing over the receiver's
    NIC. The bars say both (x32.00, fabric x1.00) and the legend names both reference lines;
    nothing calls the endpoint bound 'ideal' or 'no contention' any more."""
    records = [dataclasses.replace(r, endpoint_bound_s=r.completion_s,
                                   line_rate_s=r.completion_s / 32, slowdown=32.0,
                                   fabric_slowdown=1.0) for r in report.records]
    plots.plot_completion(dataclasses.replace(report, records=records, failures=None),
                          tmp_path / "completion.png")
    (fig,) = figures
    words = "\n".join(texts(fig))
    assert "×32.00\nfabric ×1.00" in words
    assert "line rate: every flow at its NIC rate" in words
    assert "endpoint bound: NICs shared" in words
    assert "ideal" not in words and "no contention" not in words
    styles = {line.get_linestyle() for ax in visible_axes(fig) for line in ax.get_lines()}
    assert {":", "-."} <= styles


def test_stalled_completion_is_drawn_not_dropped(report, tmp_path, figures):
    """A stalled mrc record gets a hatched 'stalled' bar in its panel, and failure sets that
    all stalled are counted, not silently left out."""
    records = [dataclasses.replace(r, completion_s=None, slowdown=None, algbw_gbps=None,
                                   busbw_gbps=None) if r.policy == "mrc" else r
               for r in report.records]
    summaries = [dataclasses.replace(s, completion_s=None, stalled_sets=s.sets)
                 if s.policy == "spray" else s for s in report.failures.summaries]
    stalled = dataclasses.replace(report, records=records, failures=dataclasses.replace(
        report.failures, summaries=summaries))
    path = plots.plot_completion(stalled, tmp_path / "completion.png")
    assert_png(path)
    (fig,) = figures
    words = texts(fig)
    assert words.count("stalled") == len(TINY_WORKLOAD)
    assert sum("sets\nstalled" in t for t in words) == len(TINY_WORKLOAD)
    for ax in visible_axes(fig):
        hatched = [p for p in ax.patches if p.get_hatch()]
        assert len(hatched) == 1 and hatched[0].get_height() > 0
        assert len(ax.get_xticklabels()) == len(POLICIES)
    # every sharing run stalled renders too
    rows = [dataclasses.replace(r, together_s=None, alone_s=None, slowdown=None)
            for r in sharing_rows()]
    assert_png(plots.plot_sharing(dataclasses.replace(report, sharing=rows),
                                  tmp_path / "sharing.png"))


def test_utilisation_cdf_goes_log_only_for_a_tail_of_10x_capacity(report, tmp_path, figures):
    """Quickstart-like tails (up to 7x) stay linear; an incast-like tail of 40x goes log-x,
    with idle links drawn at the left edge instead of vanishing."""
    incast = [0.0] * 30 + [0.5] * 60 + [40.0] * 11
    records = [dataclasses.replace(r, utilisation_cdf=incast) if r.workload == "ring" else r
               for r in report.records]
    plots.plot_utilisation_cdf(dataclasses.replace(report, records=records),
                               tmp_path / "cdf.png")
    (fig,) = figures
    linear, zoom, log = visible_axes(fig)      # the permutation's ECMP tail adds a zoom
    assert [ax.get_xscale() for ax in (linear, zoom, log)] == ["linear", "linear", "log"]
    drawn = next(line for line in log.get_lines() if line.get_label().startswith("ecmp"))
    assert min(drawn.get_xdata()) == pytest.approx(0.25)


def test_utilisation_cdf_zooms_beside_a_far_ecmp_tail(report, tmp_path, figures):
    """The tiny permutation has ECMP at P100 4.0 beside spraying at 1.0: on one linear axis to
    4.2 the spraying curves are a single vertical line. A second panel beside it zooms to the
    others' range and says which policy runs on past its edge; both share the y axis."""
    p100 = {r.policy: r.p100_utilisation for r in report.records
            if r.workload == "permutation"}
    assert p100["ecmp"] >= plots.ZOOM_ABOVE * max(p100["spray"], p100["mrc"])
    assert plots.cdf_panels(report)[:2] == [("permutation", None),
                                           ("permutation", pytest.approx(1.1))]
    plots.plot_utilisation_cdf(report, tmp_path / "cdf.png")
    (fig,) = figures
    whole, zoom = visible_axes(fig)[:2]
    assert whole.get_xlim()[1] > 4.0 and zoom.get_xlim() == pytest.approx((0.0, 1.1))
    assert "ecmp runs on" in zoom.get_title()
    assert zoom.get_shared_y_axes().joined(whole, zoom)
    # policies within 2x of each other keep one panel
    close = dataclasses.replace(report, records=[
        dataclasses.replace(r, p100_utilisation=1.5) if r.policy == "ecmp" else r
        for r in report.records])
    assert [zoom for _, zoom in plots.cdf_panels(close)] == [None, None]


def test_mrc_trace_shows_every_iteration_and_spraying(traced, tmp_path, figures):
    plots.plot_mrc_trace(traced, tmp_path / "mrc_trace.png")
    (fig,) = figures
    records = [r for r in traced.records if r.policy == "mrc"]
    panels = visible_axes(fig)
    assert len(panels) == len(records)
    # side by side on one y scale
    assert len({ax.get_ylim() for ax in panels}) == 1
    for ax, record in zip(panels, records):
        mrc = next(line for line in ax.get_lines() if line.get_label().startswith("mrc"))
        assert list(mrc.get_ydata()) == pytest.approx(record.trace)
        spray = next(line for line in ax.get_lines() if line.get_label().startswith("spray"))
        assert spray.get_linestyle() == "--"
        assert matplotlib.colors.same_color(spray.get_color(), get("spray").display.colour)


def test_no_mrc_trace_figure_when_mrc_ran_zero_iterations(report, tmp_path):
    """The real tiny mrc is balanced at the start: a one-point trace, nothing to draw (before,
    an empty panel with a lone star)."""
    assert {len(r.trace) for r in report.records if r.policy == "mrc"} == {1}
    assert plots.plot_mrc_trace(report, tmp_path / "mrc_trace.png") is None
    assert not any(tmp_path.iterdir())


def test_failed_render_leaves_the_old_file_and_no_temp(report, tmp_path, monkeypatch):
    target = tmp_path / "completion.png"
    target.write_bytes(b"old")

    def broken(self, handle, **kwargs):
        handle.write(b"\x89PNG half an image")
        raise RuntimeError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        plots.plot_completion(report, target)
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["completion.png"]


# --------------------------------------------------------------------------- sweeps

def sweep_rows() -> list[dict]:
    """fabric.planes x workload[0].size x policy x workload, a stalled ecmp ring at 2 planes."""
    rows = []
    for planes in (1, 2, 4, 8):
        for size in ("1MiB", "1GiB"):
            for policy in POLICIES:
                for workload in ("permutation", "ring"):
                    p100 = {"ecmp": 6.0 / planes, "spray": 1.6, "mrc": 1.3}[policy]
                    stalled = policy == "ecmp" and planes == 2 and workload == "ring"
                    completion = None if stalled else 1e-3 * p100 * (1e3 if size == "1GiB"
                                                                      else 1.0)
                    rows.append({"fabric.planes": planes, "workload[0].size": size,
                                 "policy": policy, "workload": workload,
                                 "p100_utilisation": p100, "completion_s": completion,
                                 "busbw_gbps": None,
                                 "slowdown": None if stalled else max(1.0, p100),
                                 "fabric_slowdown": None if stalled else max(1.0, p100)})
    return rows


def test_sweep_curves_one_panel_per_other_axis(tmp_path, figures):
    rows = sweep_rows()
    path = plots.plot_sweep(rows, ["fabric.planes", "workload[0].size"],
                            tmp_path / "sweep.png", metric="completion_s")
    assert_png(path)
    (fig,) = figures
    panels = visible_axes(fig)
    assert [ax.get_title() for ax in panels] == ["workload[0].size=1MiB",
                                                "workload[0].size=1GiB"]
    # the two panels pick their own unit (1 MiB points in ms, 1 GiB points in s)
    assert [ax.get_ylabel() for ax in panels] == ["completion time (ms)", "completion time (s)"]
    for ax in panels:
        series = [line for line in ax.get_lines() if line.get_marker() not in ("x", "None")]
        assert len(series) == len(POLICIES) * 2
        misses = [line for line in ax.get_lines() if line.get_marker() == "x"]
        assert len(misses) == 1 and list(misses[0].get_xdata()) == [2.0]


def test_sweep_categorical_x_and_linked_axes(tmp_path, figures):
    """String values sit in order of appearance; an axis that moves with the first one (one
    --set of two paths) does not split the figure into panels."""
    rows = [{"workload[0].size": size, "fabric.port_gbps": gbps, "policy": policy,
             "workload": "permutation", "p100_utilisation": p100}
            for size, gbps, p100 in (("1MiB", 100, 1.2), ("64MiB", 200, 1.5), ("1GiB", 400, 2.0))
            for policy in ("spray", "ecmp")]
    path = plots.plot_sweep(rows, ["workload[0].size", "fabric.port_gbps"],
                            tmp_path / "sweep.png")
    assert_png(path)
    (fig,) = figures
    (ax,) = visible_axes(fig)
    # each x names every field that moved with it
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1MiB\n100", "64MiB\n200",
                                                           "1GiB\n400"]
    assert len([line for line in ax.get_lines() if line.get_label() != "capacity"]) >= 2
    # a zipped sweep names every field that moved (before: only the first)
    assert ax.get_xlabel() == "workload[0].size\nfabric.port_gbps"
    assert "sweep over workload[0].size + fabric.port_gbps" in fig.get_suptitle()


def test_sweep_panels_of_like_scale_share_the_y_axis(tmp_path, figures):
    """P100 panels (1.3 to 6) share one y range and one label; completion panels 1000x apart
    keep their own (see test_sweep_curves_one_panel_per_other_axis)."""
    plots.plot_sweep(sweep_rows(), ["fabric.planes", "workload[0].size"],
                     tmp_path / "sweep.png", metric="p100_utilisation")
    (fig,) = figures
    left, right = visible_axes(fig)
    assert left.get_shared_y_axes().joined(left, right)
    assert left.get_ylim() == right.get_ylim()
    assert right.get_ylabel() == ""


def test_write_plots_sweep_figures_per_metric(tmp_path):
    folder = tmp_path / "sweep"
    paths = plots.write_plots(None, folder, sweep=(sweep_rows(),
                                                   ["fabric.planes", "workload[0].size"]))
    # busbw is None on every row: no figure for it
    assert [p.name for p in paths] == ["sweep_p100_utilisation.png", "sweep_completion_s.png",
                                       "sweep_slowdown.png", "sweep_fabric_slowdown.png"]
    for path in paths:
        assert_png(path)
    assert no_temp_files(folder)
    assert plots.plot_sweep([], ["fabric.planes"], folder / "empty.png") is None
    with pytest.raises(ValueError):
        plots.plot_sweep(sweep_rows(), [], folder / "no_axes.png")


def test_many_panels_grow_the_figure(tmp_path):
    rows = [{"fabric.planes": planes, "seed": seed, "policy": "spray", "workload": "w",
             "p100_utilisation": 1.0 + seed / 10} for seed in range(7) for planes in (1, 2)]
    path = plots.plot_sweep(rows, ["fabric.planes", "seed"], tmp_path / "sweep.png")
    assert plots.grid_shape(7) == (3, 3)
    width, height = plots.figure_size(3)
    assert_png(path, (round(width * plots.DPI), round(height * plots.DPI)))


def test_time_unit_keeps_the_largest_value_between_1_and_1000():
    assert plots.time_unit([2.5, 0.1]) == (1.0, "s")
    assert plots.time_unit([3.5e-3, None]) == (1e3, "ms")
    assert plots.time_unit([2e-4, 1e-5]) == (1e6, "µs")
    assert plots.time_unit([None]) == (1.0, "s")


# --------------------------------------------------------------------------- slow tier

@pytest.mark.slow
def test_sharing_figure_from_a_real_two_job_analysis(tmp_path):
    scenario = parse_scenario({
        "name": "two-jobs", "fabric": TINY_FABRIC, "policies": ["ecmp", "spray"],
        "jobs": [{"name": "a", "collective": "permutation", "size": "4MiB", "gpus": 16},
                 {"name": "b", "collective": "permutation", "size": "4MiB", "gpus": 16}]})
    two_jobs = analyze(scenario)
    assert two_jobs.sharing
    paths = plots.write_plots(two_jobs, tmp_path)
    assert "sharing.png" in [p.name for p in paths]
    for path in paths:
        assert_png(path)
