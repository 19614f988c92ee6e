"""The real `fabricjax` command on tiny scenarios: exit codes, stderr, JSON reports.

Contract: bad input exits 2 with exactly one stderr line that names the field and what is
allowed, no traceback, and no output file even with `--json`; good input exits 0 and the JSON
report's `results` are finite records. Error runs do not import JAX, so they take well under a
second; the few good runs take a few seconds each.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "scenarios" / "quickstart.yaml"
TIMEOUT_S = 120

TINY = textwrap.dedent("""\
    name: tiny
    seed: 3
    fabric: {gpus: 64, planes: 2, radix: 16}
    workload:
      - {name: perm, collective: permutation, size: 4MB}
      - {name: ring, collective: all-reduce, size: 16MB, order: random}
    """)
TINY_FABRIC = "fabric: {gpus: 64, planes: 2, radix: 16}\n"
ONE_PERM = "workload: [{collective: permutation}]\n"


def _env() -> dict:
    env = dict(os.environ)
    for name in ("FABRICJAX_DEBUG", "FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        env.pop(name, None)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def fabricjax(*args, cwd) -> subprocess.CompletedProcess:
    """Run `python -m fabricjax_cli.main ARGS` (what the `fabricjax` script runs) in `cwd`."""
    return subprocess.run([sys.executable, "-m", "fabricjax_cli.main", *map(str, args)], cwd=cwd,
                          env=_env(), capture_output=True, text=True, timeout=TIMEOUT_S)


def assert_one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    detail = f"rc={proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert proc.returncode == 2, detail
    assert "Traceback" not in proc.stderr + proc.stdout, detail
    lines = proc.stderr.rstrip("\n").split("\n")
    assert len(lines) == 1 and lines[0].strip(), detail
    for fragment in fragments:
        assert fragment in lines[0], (fragment, detail)
    return lines[0]


def _strict_constant(name: str):
    raise ValueError(f"non-finite JSON constant {name}")


def _strict_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"non-finite JSON number {text}")
    return value


def load_json_strict(path: Path) -> dict:
    return json.loads(path.read_text(), parse_constant=_strict_constant,
                      parse_float=_strict_float)


# --------------------------------------------------------------------------- good runs

@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """One full analysis of the tiny scenario with the default (all four) policies and a
    JSON report."""
    root = tmp_path_factory.mktemp("tiny")
    (root / "tiny.yaml").write_text(TINY)
    proc = fabricjax("analyze", "tiny.yaml", "--json", "out.json", cwd=root)
    return proc, root / "out.json"


REQUIRED = ("policy", "p99_utilisation", "p100_utilisation", "completion_s", "busbw_gbps",
            "status")


def test_good_run_exits_0_and_writes_json(tiny_run):
    proc, out = tiny_run
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "wrote out.json" in proc.stdout
    for policy in ("ecmp", "spray", "mrc", "optimal"):   # the default policies
        assert policy in proc.stdout
    assert "Iterative policies" in proc.stdout
    report = load_json_strict(out)
    assert report["scenario"] == "tiny"
    assert report["seed"] == 3
    assert report["fabric"]["gpus"] == 64
    assert set(report["versions"]) >= {"fabricjax", "jax", "numpy", "device"}
    records = report["results"]
    assert isinstance(records, list)
    assert {(r["policy"], r["workload"]) for r in records} == {
        (p, w) for p in ("ecmp", "spray", "mrc", "optimal") for w in ("perm", "ring")}
    for record in records:
        for key in REQUIRED:
            assert key in record, (key, record)
        assert record["status"] == "ok", record
        if record["policy"] in ("mrc", "optimal"):   # iterative policies say how they ended
            assert isinstance(record["iterations"], int) and record["iterations"] >= 0
            # zero iterations read as what they are, never as "not run"
            assert (record["convergence"].startswith("converged") or record["convergence"] in (
                "balanced at the start (nothing marked)", "solved at the first check (gap)")
                ), record
            assert (record["iterations"] == 0) == (not record["convergence"].startswith(
                "converged")), record
            assert record["residual"] >= 0
        else:
            assert record["iterations"] is None and record["convergence"] is None
        assert 0 < record["p99_utilisation"] <= record["p100_utilisation"]
        assert record["completion_s"] > 0
        assert record["busbw_gbps"] > 0
    # no temporary file is left beside the report
    assert sorted(p.name for p in out.parent.iterdir()) == ["out.json", "tiny.yaml"]


def test_policies_are_ordered_on_a_permutation(tiny_run):
    _, out = tiny_run
    records = load_json_strict(out)["results"]
    p100 = {r["policy"]: r["p100_utilisation"] for r in records if r["workload"] == "perm"}
    assert p100["ecmp"] >= p100["spray"] - 1e-6
    assert p100["optimal"] <= p100["mrc"] + 1e-5 and p100["mrc"] <= p100["spray"] + 1e-5
    done = {r["policy"]: r["completion_s"] for r in records if r["workload"] == "perm"}
    assert done["ecmp"] >= done["spray"] * (1 - 1e-6)


def test_policy_option_restricts_records_and_seed_overrides(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = fabricjax("analyze", "tiny.yaml", "--policy", "spray", "--seed", "5", "-q",
                     "--json", "spray.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = load_json_strict(tmp_path / "spray.json")
    assert report["seed"] == 5
    assert [r["policy"] for r in report["results"]] == ["spray", "spray"]


@pytest.mark.parametrize("args", [["--version"], ["-h"], ["--help"], ["analyze", "-h"],
                                  ["topo", "--help"]],
                         ids=["version", "h", "help", "analyze-h", "topo-help"])
def test_version_and_help(tmp_path, args):
    proc = fabricjax(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    if args == ["--version"]:
        assert proc.stdout.strip().startswith("fabricjax ")
    else:
        assert "Usage" in proc.stdout


def test_topo_quickstart(tmp_path):
    proc = fabricjax("topo", QUICKSTART, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "1,024" in proc.stdout  # GPUs
    assert "Traceback" not in proc.stderr


def test_topo_json(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = fabricjax("topo", "tiny.yaml", "--json", "topo.json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    summary = load_json_strict(tmp_path / "topo.json")
    assert summary["gpus"] == 64 and summary["planes"] == 2 and summary["radix"] == 16
    assert summary["max_gpus_two_tiers"] == 128


# --------------------------------------------------------------------------- bad scenario files

# (id, file content as bytes or str, fragments stderr must contain: the field, what is allowed)
BAD_FILES = [
    ("not-yaml", "fabric: [1, 2\n", ["is not valid YAML", "line"]),
    ("not-utf8", b"\xff\xfe\x00\x01garbage\n", ["UTF-8"]),
    ("unknown-field", TINY + "bogus: 1\n", ["bogus", "allowed", "workload"]),
    ("unknown-nested", TINY_FABRIC + "workload: [{collective: permutation, sise: 1GiB}]\n",
     ["workload[0].sise", "size"]),
    ("wrong-type", "fabric: {gpus: 64, planes: 2, radix: sixteen}\n" + ONE_PERM,
     ["fabric.radix", "integer"]),
    ("bad-enum", TINY + "policies: [ecmp, random]\n", ["policies[1]", "'ecmp'", "'spray'"]),
    ("negative-size", TINY_FABRIC + "workload: [{collective: permutation, size: -4MB}]\n",
     ["workload[0].size", "1GiB"]),
    ("zero-size", TINY_FABRIC + "workload: [{collective: all-reduce, size: 0}]\n",
     ["workload[0].size", "positive"]),
    ("zero-radix", "fabric: {gpus: 64, planes: 2, radix: 0}\n" + ONE_PERM,
     ["fabric.radix", "2"]),
    ("negative-port", "fabric: {gpus: 64, port_gbps: -100G, radix: 16}\n" + ONE_PERM,
     ["fabric.port_gbps", "800Gbps"]),
    ("odd-radix", "fabric: {gpus: 64, planes: 2, radix: 15}\n" + ONE_PERM,
     ["fabric.radix", "even"]),
    ("oversubscription", "fabric: {gpus: 64, radix: 16, oversubscription: 2}\n" + ONE_PERM,
     ["fabric.oversubscription", "allowed"]),
    ("too-many-gpus", "fabric: {gpus: 129, planes: 2, radix: 16}\n" + ONE_PERM,
     ["fabric.gpus", "2..128"]),
    ("empty-workload", TINY_FABRIC + "workload: []\n", ["workload", "at least 1"]),
    ("missing-workload", TINY_FABRIC, ["workload", "missing"]),
    ("gpu-out-of-range", TINY_FABRIC + "workload: [{collective: permutation, gpus: [0, 64]}]\n",
     ["workload[0].gpus", "0..63"]),
    ("gpu-repeated", TINY_FABRIC + "workload: [{collective: all-reduce, gpus: [3, 4, 3]}]\n",
     ["workload[0].gpus", "more than once"]),
    ("shift-identity", TINY_FABRIC + "workload: [{collective: permutation, shift: 64}]\n",
     ["workload[0].shift", "multiple of 64"]),
    ("python-tag", "fabric: !!python/object/apply:os.system ['touch MARKER']\n" + ONE_PERM,
     ["is not valid YAML"]),
    ("python-name-tag", "name: !!python/name:os.system\n" + TINY_FABRIC + ONE_PERM,
     ["is not valid YAML"]),
    ("empty-file", "", ["empty"]),
    ("top-level-list", "- 1\n- 2\n", ["mapping"]),
    ("deep-nesting", "name: " + "[" * 5000 + "]" * 5000 + "\n", ["scenario.yaml"]),
    # Found while writing these tests: user text inside the message must not be read as rich
    # markup, an impossible date must not crash the YAML reader, a huge integer must not
    # overflow, and `planes: yes` is a boolean, not one plane.
    ("markup-in-value", TINY_FABRIC + "workload: [{collective: permutation, size: '[/x]'}]\n",
     ["workload[0].size", "[/x]"]),
    ("bad-date", TINY_FABRIC + ONE_PERM + "name: 2024-13-45\n", ["scenario.yaml"]),
    ("huge-integer", "fabric: {gpus: 64, planes: 2, radix: 1" + "0" * 400 + "}\n" + ONE_PERM,
     ["fabric.radix"]),
    ("yes-planes", "fabric: {gpus: 64, planes: yes, radix: 16}\n" + ONE_PERM,
     ["fabric.planes"]),
]


@pytest.mark.parametrize(("content", "fragments"),
                         [pytest.param(c, f, id=i) for i, c, f in BAD_FILES])
def test_bad_scenario_exits_2_with_one_line(tmp_path, content, fragments):
    path = tmp_path / "scenario.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    proc = fabricjax("analyze", "scenario.yaml", "--json", "out.json", cwd=tmp_path)
    assert_one_line_error(proc, *fragments)
    assert not (tmp_path / "out.json").exists()
    assert not (tmp_path / "MARKER").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scenario.yaml"]


def test_bad_scenario_leaves_an_existing_report_alone(tmp_path):
    (tmp_path / "scenario.yaml").write_text("fabric: {radix: 15}\n" + ONE_PERM)
    (tmp_path / "out.json").write_text("old\n")
    proc = fabricjax("analyze", "scenario.yaml", "--json", "out.json", cwd=tmp_path)
    assert_one_line_error(proc, "fabric.radix")
    assert (tmp_path / "out.json").read_text() == "old\n"


def test_topo_bad_scenario(tmp_path):
    (tmp_path / "scenario.yaml").write_text("fabric: {gpus: 64, planes: 2, radix: 15}\n"
                                            + ONE_PERM)
    proc = fabricjax("topo", "scenario.yaml", "--json", "topo.json", cwd=tmp_path)
    assert_one_line_error(proc, "fabric.radix", "even")
    assert not (tmp_path / "topo.json").exists()


@pytest.mark.parametrize(
    ("target", "fragments"),
    [("missing.yaml", ["missing.yaml", "no such file"]),
     (".", ["directory"]),
     ("[/nosuch].yaml", ["[/nosuch].yaml", "no such file"])],
    ids=["missing", "directory", "markup-in-path"],
)
def test_missing_file_or_directory(tmp_path, target, fragments):
    proc = fabricjax("analyze", target, "--json", "out.json", cwd=tmp_path)
    assert_one_line_error(proc, *fragments)
    assert not (tmp_path / "out.json").exists()


# --------------------------------------------------------------------------- bad options

@pytest.mark.parametrize(
    ("args", "fragments"),
    [(["--seed", "-1"], ["seed", "0"]),
     (["--policy", "fastest"], ["polic", "'ecmp'", "'spray'"]),
     (["--policy", "ecmp", "--policy", "ecmp"], ["polic", "once"])],
    ids=["seed", "policy", "policy-twice"],
)
def test_bad_options_exit_2(tmp_path, args, fragments):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = fabricjax("analyze", "tiny.yaml", *args, "--json", "out.json", cwd=tmp_path)
    assert_one_line_error(proc, *fragments)
    assert not (tmp_path / "out.json").exists()


_RUN_WITHOUT_COMPUTING = textwrap.dedent("""\
    import sys
    import fabricjax_cli.main

    def computed(*args, **kwargs):
        print("COMPUTED")
        sys.exit(99)

    fabricjax_cli.main._run_analysis = computed
    sys.argv = ["fabricjax"] + sys.argv[1:]
    fabricjax_cli.main.main()
    """)


@pytest.mark.parametrize("target", ["no/such/dir/out.json", "."],
                         ids=["missing-directory", "directory"])
def test_json_target_is_checked_before_computing(tmp_path, target):
    (tmp_path / "tiny.yaml").write_text(TINY)
    proc = subprocess.run([sys.executable, "-c", _RUN_WITHOUT_COMPUTING, "analyze",
                           "tiny.yaml", "--json", target], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    assert_one_line_error(proc, "--json", target)
    assert "COMPUTED" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tiny.yaml"]


FAILURES = TINY_FABRIC + textwrap.dedent("""\
    seed: 5
    workload: [{name: perm, collective: permutation, size: 4MB}]
    policies: [ecmp, mrc]
    mrc: {evs: 16, max_iters: 30, patience: 5}
    failures: {samples: 3, links: {random: 2}, nic_ports: [plane1/gpu9]}
    reliability: {link_failures_per_hour: 1.0e-4}
    """)


def test_failures_run_prints_tables_and_writes_records(tmp_path):
    (tmp_path / "f.yaml").write_text(FAILURES)
    proc = fabricjax("analyze", "f.yaml", "-q", "--samples", "4", "--json", "out.json",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    for title in ("Steady state over 4 failure sets", "Transient", "Reliability what-if",
                  "worst set #"):
        assert title in proc.stdout, title
    report = json.loads((tmp_path / "out.json").read_text())
    records = report["failures"]["records"]
    assert len(records) == 2 * 4 and {r["failure_set"] for r in records} == {0, 1, 2, 3}
    assert all("plane1/gpu9" in r["components"] for r in records)
    assert all(r["affected_flows"] > 0 for r in records)   # gpu9's port carries its flows
    assert [s["policy"] for s in report["failures"]["summary"]] == ["ecmp", "mrc"]
    assert [r["policy"] for r in report["reliability"]] == ["ecmp", "mrc"]


def test_failure_errors_exit_2(tmp_path):
    (tmp_path / "plain.yaml").write_text(TINY)
    assert_one_line_error(fabricjax("analyze", "plain.yaml", "--samples", "5", cwd=tmp_path),
                          "--samples", "failures")
    (tmp_path / "bad.yaml").write_text(
        TINY + "failures: {switches: [plane9/t1-0]}\n")
    assert_one_line_error(fabricjax("analyze", "bad.yaml", cwd=tmp_path),
                          "failures.switches.names[0]", "plane9/t1-0")
