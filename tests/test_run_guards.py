"""Robustness of a run as a whole: the memory model and its refusal, `--device`, byte-identical
reports across runs and chunkings, Ctrl-C, and what a scenario file can make the tool read.

Each CLI case runs the real command in a fresh process (what a user runs); the determinism
cases compare the JSON files byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from fabricjax.core.errors import ScenarioError
from fabricjax.engine import plan
from fabricjax.engine.plan import (
    check_memory, coefficients, estimate_memory, max_flows, slots_per_flow,
)
from fabricjax.report.json import NonFiniteError, finite as _finite
from fabricjax.scenario import parse_scenario
from test_cli import _env, assert_one_line_error, fabricjax

ROOT = Path(__file__).resolve().parent.parent
BIG = {"fabric": {"gpus": 131072, "planes": 8, "radix": 512},
       "workload": [{"collective": "all-reduce", "size": "1GiB"}],
       "policies": ["ecmp", "spray", "mrc"], "spray": {"evs": 128}, "mrc": {"evs": 128}}

# 8 failure sets of a small fabric, each hitting flows. optimal is the policy whose last bit
# moved when sets were vmapped; mrc compiles for a minute per process, and its chunk
# invariance is tested in-process (test_failures.py)
FAILING = textwrap.dedent("""\
    name: failing
    seed: 5
    fabric: {gpus: 64, planes: 2, radix: 16}
    workload:
      - {name: perm, collective: permutation, size: 8MB}
    policies: [ecmp, spray, optimal]
    spray: {evs: 8}
    mrc: {evs: 8, max_iters: 20, patience: 5}
    failures: {samples: 8, links: 2, nic_ports: 1, switches: {random: 1, tier: t1},
               degraded: {random: 1, factor: 0.5}}
    """)


# --------------------------------------------------------------------------- memory model

def test_estimate_grows_with_every_dimension():
    base = estimate_memory(parse_scenario(BIG))
    more_evs = estimate_memory(parse_scenario({**BIG, "mrc": {"evs": 256}}))
    fewer_gpus = estimate_memory(parse_scenario(
        {**BIG, "workload": [{"collective": "all-reduce", "gpus": 1024}]}))
    no_mrc = estimate_memory(parse_scenario({**BIG, "policies": ["ecmp", "spray"]}))
    assert more_evs.total > base.total > fewer_gpus.total and no_mrc.total < base.total
    assert base.solve_policy == "mrc" and base.flows == 131072 and base.slots == 128
    assert base.solve == coefficients("mrc").bytes_per_slot * 131072 * 128
    with_failures = estimate_memory(parse_scenario({**BIG, "failures": {"samples": 1000,
                                                                        "links": 2}}))
    assert with_failures.failure_records > 0 and with_failures.total > base.total


def test_estimate_counts_the_dynamic_level_and_stored_paths():
    """`solver.model: dynamic` runs the dynamic level beside the static solve it starts from,
    and a fat tree stores [F, K, H] link ids: both are in the estimate (an 8k dynamic run
    peaked at 960 MiB against an estimate of 510 MiB that left it out)."""
    perm = {"fabric": {"gpus": 8192, "planes": 8, "radix": 256},
            "workload": [{"collective": "permutation", "size": "256KiB"}],
            "policies": ["spray"]}
    static = estimate_memory(parse_scenario(perm))
    dynamic = estimate_memory(parse_scenario({**perm, "solver": {"model": "dynamic"}}))
    assert static.dynamic == 0
    assert dynamic.dynamic == plan.dynamic_memory(
        8192, 128, 4, static.fabric // plan.BYTES_PER_LINK - 1, plan.LAG_STEPS_MAX,
        plan.ACK_LAG_STEPS_MAX)
    assert dynamic.total == static.total + dynamic.dynamic
    tree = {"fabric": {"kind": "fat-tree", "tiers": 3, "gpus": 8192, "radix": 32,
                       "planes": 1}, "workload": perm["workload"], "policies": ["spray"]}
    stored = estimate_memory(parse_scenario(tree))
    assert stored.slots == 256            # the whole equal-cost set of a k = 32 fat tree
    assert stored.solve == coefficients("spray").bytes_per_slot * 8192 * 256
    assert stored.fabric == (plan.GRAPH_RUNTIME_BYTES +
                             6 * plan.BYTES_PER_STORED_HOP * 8192 * 256)


@pytest.mark.slow
def test_the_estimate_bounds_the_measured_peak_within_2x():
    """`bench/memory_calibration.py` on a fat tree under every policy, the dynamic level and
    a fat-tree failure study, each cold in a fresh process: estimate / peak within 1x-2x."""
    rows = ["ft-k16-1k", "1k-dynamic", "fat-tree-failures"]
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "memory_calibration.py"),
                           "--only", *rows], capture_output=True, text=True, env=_env())
    assert proc.returncode == 0, proc.stderr
    assert all(row in proc.stdout for row in rows), proc.stdout
    assert "outside: none" in proc.stdout, proc.stdout


def test_flows_and_slots_come_from_the_config():
    s = parse_scenario({"fabric": {"gpus": 256, "planes": 4, "radix": 32},
                        "workload": [{"collective": "permutation", "gpus": 100},
                                     {"collective": "all-reduce", "gpus": 200}],
                        "ecmp": {"qps": 3}, "spray": {"evs": 16}})
    assert max_flows(s) == 200
    assert slots_per_flow("ecmp", s) == 12 and slots_per_flow("spray", s) == 16
    assert slots_per_flow("optimal", s) == 4 * 16   # planes x spines (radix 32: 16 up)


@pytest.mark.parametrize("limit_gib,fix", [(3.0, "mrc.evs <= "), (2.0, "only --policy ecmp"),
                                           (0.1, "a smaller fabric")])
def test_refusal_names_the_estimate_and_a_change_that_fits(limit_gib, fix):
    scenario = parse_scenario(BIG)
    limit = int(limit_gib * 2**30)
    with pytest.raises(ScenarioError) as err:
        check_memory(scenario, limit)
    message = str(err.value)
    assert "needs about" in message and "mrc on 131,072 flows x 128 paths" in message
    assert "--max-memory" in message and fix in message and "\n" not in message
    if fix == "mrc.evs <= ":   # the suggested EV count fits and the next multiple does not
        evs = int(message.split("mrc.evs <= ")[1].split()[0])
        assert evs % 8 == 0
        fits = parse_scenario({**BIG, "mrc": {"evs": evs}})
        assert estimate_memory(fits).total <= limit
        assert estimate_memory(parse_scenario({**BIG, "mrc": {"evs": evs + 8}})).total > limit
    assert check_memory(scenario, None).total == estimate_memory(scenario).total


def test_cli_refuses_before_computing_and_writes_nothing(tmp_path):
    (tmp_path / "big.yaml").write_text(json.dumps(BIG))
    start = time.perf_counter()
    proc = fabricjax("analyze", "big.yaml", "--max-memory", "2GiB", "--json", "out.json",
                     cwd=tmp_path)
    line = assert_one_line_error(proc, "big.yaml", "needs about", "more than the 2 GiB")
    assert "would fit: only --policy ecmp" in line
    assert time.perf_counter() - start < 60          # nothing was built or compiled
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.yaml"]


@pytest.mark.parametrize("args,fragments", [
    (["--max-memory", "lots"], ["--max-memory", "1GiB"]),
    (["--max-memory", "-4MB"], ["--max-memory"]),
    (["--device", "tpu"], ["--device", "allowed: cpu, gpu"]),
    (["--chunk", "4"], ["--chunk", "no `failures` section"]),
    (["--chunk", "0"], ["--chunk", "greater than or equal to 1"]),
])
def test_run_options_are_checked(tmp_path, args, fragments):
    (tmp_path / "s.yaml").write_text(FAILING if args[0] == "--chunk" and args[1] == "0" else
                                     "fabric: {gpus: 64, planes: 2, radix: 16}\n"
                                     "workload: [{collective: permutation}]\n")
    assert_one_line_error(fabricjax("analyze", "s.yaml", *args, cwd=tmp_path), *fragments)


def test_gpu_request_without_a_gpu_is_a_clear_error(tmp_path):
    (tmp_path / "s.yaml").write_text("workload: [{collective: permutation}]\n"
                                     "fabric: {gpus: 64, planes: 2, radix: 16}\n")
    proc = fabricjax("analyze", "s.yaml", "--device", "gpu", cwd=tmp_path)
    if proc.returncode == 0:
        pytest.skip("this machine has a GPU visible to JAX")
    assert_one_line_error(proc, "--device", "no GPU is visible to JAX", "--device cpu")


# --------------------------------------------------------------------------- honest numbers

def test_a_non_finite_number_is_a_bug_not_a_null():
    assert _finite({"a": [1.0, {"b": 2.5}], "c": None}) == {"a": [1.0, {"b": 2.5}], "c": None}
    with pytest.raises(NonFiniteError, match=r"results\[1\]\.p100 is nan"):
        _finite({"results": [{"p100": 1.0}, {"p100": float("nan")}]})
    with pytest.raises(NonFiniteError, match="inf"):
        _finite([float("inf")])


# --------------------------------------------------------------------------- determinism

@pytest.fixture(scope="module")
def failing_reports(tmp_path_factory):
    """The FAILING scenario's JSON from two fresh processes: the default chunking (the 8 sets
    in one call) and 3 sets per call (not dividing the 8 sets)."""
    tmp = tmp_path_factory.mktemp("determinism")
    (tmp / "f.yaml").write_text(FAILING)
    runs = {"default": [], "chunk3": ["--chunk", "3"]}
    texts = {}
    for name, extra in runs.items():
        proc = fabricjax("analyze", "f.yaml", "-q", "--device", "cpu", "--json",
                         f"{name}.json", *extra, cwd=tmp)
        assert proc.returncode == 0, proc.stderr
        texts[name] = (tmp / f"{name}.json").read_bytes()
    return texts


def test_same_bytes_across_processes_and_chunkings(failing_reports):
    """Two processes (so no shared cache) and two chunkings: one byte-identical report."""
    assert failing_reports["chunk3"] == failing_reports["default"]


def test_report_records_versions_seed_and_device(failing_reports):
    report = json.loads(failing_reports["default"])
    versions = report["versions"]
    for key in ("fabricjax", "jax", "jaxlib", "numpy", "python", "device", "device_kind",
                "device_count"):
        assert versions[key] not in (None, ""), key
    assert versions["device"] == "cpu" and report["seed"] == 5
    assert "chunk" not in report["config"]["failures"]
    assert len(report["failures"]["records"]) == 3 * 8   # 3 policies x 8 sets


# --------------------------------------------------------------------------- Ctrl-C

def test_ctrl_c_exits_130_and_keeps_only_the_stream(tmp_path):
    """SIGINT in the middle of a failure study (many device calls): exit 130, one short line
    that names the stream to --resume from, the earlier report untouched, no temporary file;
    the stream beside the report is whole lines (its header, and the sets finished)."""
    text = FAILING.replace("samples: 8", "samples: 400000").replace(
        "policies: [ecmp, spray, mrc, optimal]", "policies: [spray]")
    (tmp_path / "f.yaml").write_text(text)
    (tmp_path / "keep.json").write_text("{}\n")
    proc = subprocess.Popen([sys.executable, "-m", "fabricjax_cli.main", "analyze", "f.yaml", "--json",
                             "keep.json"], cwd=tmp_path, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # ~10 s in, the run is past JAX's start, drawing or solving the 400,000 failure sets
    # (minutes of work); an interrupt during start-up takes the same exit path
    time.sleep(10)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err)
    assert "Traceback" not in err and "interrupted" in err
    lines = [line for line in err.splitlines() if "interrupted" in line]
    assert len(lines) == 1 and "keep.jsonl" in lines[0] and "--resume" in lines[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.yaml", "keep.json", "keep.jsonl"]
    assert (tmp_path / "keep.json").read_text() == "{}\n"   # the old report is untouched
    head, *records = (tmp_path / "keep.jsonl").read_text().splitlines()
    assert json.loads(head)["fabricjax_stream"] == "fabricjax failure study"
    assert [json.loads(r)["failure_set"] for r in records] == list(range(len(records)))


# --------------------------------------------------------------------------- security

AUDIT = textwrap.dedent("""\
    import sys
    opened = []
    def hook(event, args):
        if event == "open" and isinstance(args[0], str):
            opened.append(args[0])
    sys.addaudithook(hook)
    from fabricjax_cli.main import main
    sys.argv = ["fabricjax", *sys.argv[1:]]
    try:
        main()
    except SystemExit as exit:
        code = exit.code
    else:
        code = 0
    import os
    here = os.getcwd()
    mine = sorted({os.path.relpath(p, here) for p in opened
                   if os.path.abspath(p).startswith(here)})
    print("OPENED", mine, file=sys.stderr)
    sys.exit(code)
    """)


def test_a_scenario_cannot_make_the_tool_read_other_files(tmp_path):
    """Path-like strings in every free-text field stay text: the run opens the scenario and
    its own output, nothing else in the scenario's folder (an audit hook lists the opens)."""
    (tmp_path / "secret.txt").write_text("password\n")
    (tmp_path / "audit.py").write_text(AUDIT)
    (tmp_path / "s.yaml").write_text(textwrap.dedent("""\
        name: ../secret.txt
        fabric: {gpus: 64, planes: 2, radix: 16}
        workload: [{name: secret.txt, collective: permutation, size: 4MB}]
        policies: [spray]
        spray: {evs: 8}
        """))
    proc = subprocess.run([sys.executable, str(tmp_path / "audit.py"), "analyze", "s.yaml",
                           "-q", "--json", "out.json"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    opened = eval(proc.stderr.split("OPENED", 1)[1].strip())   # the list the hook printed
    assert "secret.txt" not in opened and "s.yaml" in opened
    files = [p for p in opened if not p.startswith("__editable__")]   # the import system's
    assert all(p in ("s.yaml", "out.json") or p.startswith(".out.json.") for p in files), opened


def test_a_traffic_file_is_read_only_inside_the_scenarios_folder(tmp_path):
    """A traffic matrix is the one file a scenario names: it is read from the scenario's folder
    (nothing else is opened there), and a path leaving that folder is refused unread."""
    (tmp_path / "secret.txt").write_text("0,1,100\n")
    (tmp_path / "audit.py").write_text(AUDIT)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("src,dst,bytes\n0,1,4MB\n1,0,4MB\n")
    body = ("fabric: {{gpus: 64, planes: 2, radix: 16}}\n"
            "workload: [{{collective: traffic, file: {file}}}]\npolicies: [spray]\n"
            "spray: {{evs: 8}}\n")
    (tmp_path / "s.yaml").write_text(body.format(file="data/t.csv"))
    proc = subprocess.run([sys.executable, str(tmp_path / "audit.py"), "analyze", "s.yaml",
                           "-q", "--json", "out.json"], cwd=tmp_path, env=_env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    opened = eval(proc.stderr.split("OPENED", 1)[1].strip())
    files = [p for p in opened if not p.startswith("__editable__")]
    assert "data/t.csv" in files and "secret.txt" not in files
    assert all(p in ("s.yaml", "out.json", "data/t.csv") or p.startswith(".out.json.")
               for p in files), opened
    sub = tmp_path / "sub"
    sub.mkdir()
    for file in ("../secret.txt", str(tmp_path / "secret.txt")):
        (sub / "s.yaml").write_text(body.format(file=file))
        proc = fabricjax("analyze", "s.yaml", cwd=sub)
        assert_one_line_error(proc, "workload[0].file", "outside the scenario's folder")
        assert "100" not in proc.stderr


@pytest.mark.parametrize("tag", ["!!python/object/apply:os.system ['touch pwned']",
                                 "!!python/name:os.system", "!include secret.txt"])
def test_yaml_tags_do_not_run_or_read_anything(tmp_path, tag):
    (tmp_path / "secret.txt").write_text("password\n")
    (tmp_path / "s.yaml").write_text(f"name: {tag}\nworkload: [{{collective: permutation}}]\n")
    proc = fabricjax("analyze", "s.yaml", cwd=tmp_path)
    assert_one_line_error(proc, "s.yaml")
    assert not (tmp_path / "pwned").exists()
    assert "password" not in proc.stderr + proc.stdout


# --------------------------------------------------------------------------- bounded loops

def test_every_loop_bound_is_a_reported_status():
    """max-min rounds and mrc iterations stop at their bound, and the record says so instead
    of passing the truncated answer off as converged (optimal's iteration cap: test_optimal;
    on these fabrics its bound is tight before the first iteration)."""
    from fabricjax.study.analyze import analyze

    scenario = parse_scenario({
        "fabric": {"gpus": 64, "planes": 2, "radix": 16, "oversubscription": 3},
        "workload": [{"collective": "permutation", "size": "4MB"}],
        "policies": ["ecmp", "mrc"], "ecmp": {"qps": 1},
        # below its plane's mean: marked EVs are left at the iteration cap
        "mrc": {"evs": 8, "max_iters": 1, "threshold": 0.5},
        "solver": {"max_rounds": 1, "eps": 0.0, "rates": "full"}})
    records = {r.policy: r for r in analyze(scenario).records}
    assert "round_limit" in records["ecmp"].status and records["ecmp"].rate_rounds == 1
    assert "iteration_cap" in records["mrc"].status and records["mrc"].iterations == 1
    for record in records.values():   # the numbers are still finite and marked, not NaN
        assert record.completion_s is not None and record.completion_s > 0
