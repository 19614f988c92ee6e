"""Every command output the README and the docs show, produced from real runs.

`python docs/generate.py` (`make docs-outputs`) runs each command of OUTPUTS the way a user
types it, from a scratch folder that sees the repository's `scenarios/`, and writes
`docs/outputs/NAME.txt`: the command line after `$ `, then what it printed. The pages include
these files with pymdownx.snippets, so what a page shows is what the code prints.
`tests/test_docs.py` reruns them and compares after `mask`, which hides what no two runs share
(seconds, versions, the cache's size). `--only NAME ...` regenerates some; `--quick` only the
cheap ones (`slow=False`).

It also writes the generated reference pages: `docs/reference/scenario.md` from the pydantic
models' JSON schema, `docs/reference/cli.md` from the typer app, and `docs/benchmarks-logs.md`
from the benches' last-run logs (see `reference_pages.py`).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from reference_pages import write_all  # docs/reference_pages.py, beside this file

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "docs" / "outputs"
# rich sizes tables to this when stdout is not a terminal (cli/main.py); set it anyway so that a
# user's COLUMNS cannot change what is written
WIDTH = "150"


@dataclass(frozen=True)
class Output:
    """One shown output: `commands` run one after another in the same scratch folder (each a
    command line as a user types it, `fabricjax ...`); `files` are written there first;
    `show` picks which commands appear in the file (default: all); `cut` trims a command's
    printed text (e.g. to the table a page discusses); `slow` marks runs past a few seconds."""

    name: str
    commands: tuple[str, ...]
    slow: bool = True
    files: dict[str, str] = field(default_factory=dict)
    show: tuple[int, ...] | None = None
    cut: Callable[[str, Path], str] | None = None
    # commands whose tables are elided, keeping the lines that say what was written
    elide: tuple[int, ...] = ()


def _from(marker: str) -> Callable[[str, Path], str]:
    """Keep the printed text from the first line that starts with `marker`."""
    def cut(text: str, folder: Path) -> str:
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(marker):
                return "\n".join(lines[i:])
        raise SystemExit(f"docs/generate.py: {marker!r} not found in the output")
    return cut


def _between(start: str, stop: str | None) -> Callable[[str, Path], str]:
    """Keep the printed text from the line starting with `start` up to (without) the first
    later line starting with `stop`."""
    def cut(text: str, folder: Path) -> str:
        kept = _from(start)(text, folder).splitlines()
        if stop is not None:
            for i, line in enumerate(kept[1:], 1):
                if line.startswith(stop):
                    return "\n".join(kept[:i])
        return "\n".join(kept)
    return cut


def _json_record(text: str, folder: Path) -> str:
    """One record of the report's JSON, its long lists cut short as the page says."""
    report = json.loads((folder / "out.json").read_text())
    record = dict(report["results"][0])
    record["utilisation_by_tier"] = {"t0-t1": record["utilisation_by_tier"]["t0-t1"]}
    record["bottleneck_links"] = record["bottleneck_links"][:2]
    cdf = record["utilisation_cdf"]
    record["utilisation_cdf"] = cdf[:3] + [f"... {len(cdf)} values in all, P0 to P100"]
    body = json.dumps(record, indent=1)
    # the CDF on one line, as a reader skims it
    return re.sub(r'"utilisation_cdf": \[\n([^\]]*)\]',
                  lambda m: '"utilisation_cdf": [' + ", ".join(
                      v.strip() for v in m.group(1).split(",\n")) + "]", body)


BAD_YAML = "name: bad\nfabric: {radix: 63}\nworkload:\n  - {collective: permutation}\n"

OUTPUTS: tuple[Output, ...] = (
    Output("quickstart", ("fabricjax analyze scenarios/quickstart.yaml",)),
    Output("quickstart-json", ("fabricjax analyze scenarios/quickstart.yaml -p mrc -q --json out.json",),
           cut=_json_record),
    Output("single-plane-800g", ("fabricjax analyze scenarios/single-plane-800g.yaml -q",),
           cut=_between("Link utilisation", "Collective completion")),
    Output("topo-stargate", ("fabricjax topo scenarios/stargate.yaml",), slow=False),
    Output("topo-quickstart", ("fabricjax topo scenarios/quickstart.yaml",), slow=False),
    Output("sweep-planes", ("fabricjax sweep scenarios/planes.yaml -q --set "
                            "fabric.planes,fabric.port_gbps,ecmp.qps=1:800G:8,2:400G:4,4:200G:2,8:100G:1",)),
    # after a small run has filled the private home's cache
    Output("cache", ("fabricjax analyze scenarios/permutation.yaml -q -p ecmp", "fabricjax cache"),
           slow=False, show=(1,)),
    Output("bad-yaml", ("fabricjax analyze bad.yaml",), slow=False, files={"bad.yaml": BAD_YAML}),
    Output("max-memory", ("fabricjax analyze scenarios/stargate.yaml --max-memory 3GiB",),
           slow=False),
    Output("dev-full", ("fabricjax topo scenarios/quickstart.yaml --json /dev/full",), slow=False),
    Output("resume-refused", (
        "fabricjax analyze scenarios/failures.yaml -p spray -q --samples 16 --json f.json",
        "fabricjax analyze scenarios/failures.yaml -p spray -q --samples 8 --json f.json --resume"),
        elide=(0,)),
    Output("failures", ("fabricjax analyze scenarios/failures.yaml -q",), cut=_from("Failure sets")),
    Output("two-jobs", ("fabricjax analyze scenarios/two-jobs.yaml -q",),
           cut=_between("Jobs sharing the fabric", "Iterative policies")),
    Output("training-dense-3d", ("fabricjax analyze scenarios/training-dense-3d.yaml -q",),
           cut=_from("Training step: communication")),
    # the rows as CSV: the step's columns do not fit a table in 150 characters
    Output("training-dense-3d-rails", ("fabricjax sweep scenarios/training-dense-3d.yaml -q "
                                       "--set fabric.rail_optimised=false,true --csv -",)),
    Output("training-moe", ("fabricjax analyze scenarios/training-moe.yaml -q",),
           cut=_from("Training step: communication")),
    Output("training-moe-32k-refused", (
        "fabricjax analyze scenarios/training-moe-32k.yaml",
        "fabricjax analyze scenarios/training-moe-32k.yaml --max-memory 8GiB"), slow=False),
    Output("training-moe-32k", ("fabricjax analyze scenarios/training-moe-32k.yaml -q -p ecmp -p spray",),
           cut=_from("Training step: communication")),
    Output("chakra", ("fabricjax analyze scenarios/chakra-example.yaml -q",),
           cut=_between("Training step: communication", "Training step per policy")),
    Output("fat-tree-3tier", ("fabricjax analyze scenarios/fat-tree-3tier.yaml -q",)),
    Output("design-demo", ("fabricjax design scenarios/design-demo.yaml --json demo.json "
                           "--plot plots",)),
    Output("design-mrc-131k", ("fabricjax design scenarios/design-mrc-131k.yaml --json mrc.json",)),
    Output("sensitivity", ("fabricjax analyze scenarios/quickstart.yaml --sensitivity -q -p ecmp -p spray",),
           cut=_from("Which links to upgrade")),
)

# What no two runs share, hidden before outputs are compared: wall seconds, versions, the
# cache's contents. Each pattern's match becomes its replacement.
MASKS: tuple[tuple[str, str], ...] = (
    (r"point\(s\) in [0-9.]+ s", "point(s) in <s> s"),
    # a design search's seconds per stage and in all
    (r"(dropped(?:, \d+ confirmed)?), [0-9.]+ s", r"\1, <s> s"),
    (r"searched in [0-9.]+ s", "searched in <s> s"),
    # a sweep's CSV row ends with the point's wall seconds (point_wall_s)
    (r"(?m)^(\d+,.*),[0-9.]+$", r"\1,<s>"),
    (r"(compilation cache: [^:]*): .*", r"\1: <contents>"),
    (r"\b\d+\.\d+\.\d+(\.dev\w+)?\b", "<version>"),
)


def mask(text: str) -> str:
    """`text` with what differs between two honest runs replaced by placeholders."""
    for pattern, replacement in MASKS:
        text = re.sub(pattern, replacement, text)
    return text


def _environment(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("XDG_CACHE_HOME", None)
    env.pop("FABRICJAX_CACHE_DIR", None)
    # the compiler as a user's run has it (the test suite turns LLVM's optimisations off, and
    # the unoptimised programs' last bits can break a tie between two links the other way)
    env.pop("XLA_FLAGS", None)
    # a private home: the cache line reads ~/.cache/... and the user's cache is never touched
    env.update(HOME=str(home), COLUMNS=WIDTH, PYTHONPATH=str(ROOT) + os.pathsep +
               env.get("PYTHONPATH", ""), JAX_PLATFORMS=env.get("JAX_PLATFORMS", "cpu"))
    return env


def run(output: Output, home: Path | None = None) -> str:
    """The text `output` shows, from fresh runs of its commands."""
    with tempfile.TemporaryDirectory(prefix="fabricjax-docs-") as tmp:
        folder = Path(tmp) / "work"
        folder.mkdir()
        (folder / "scenarios").symlink_to(ROOT / "scenarios")
        for name, text in output.files.items():
            (folder / name).write_text(text)
        env = _environment(home or Path(tmp) / "home")
        shown = []
        for k, command in enumerate(output.commands):
            args = shlex.split(command)
            assert args[0] == "fabricjax"
            done = subprocess.run([sys.executable, "-m", "fabricjax_cli.main", *args[1:]],
                                  cwd=folder, env=env, capture_output=True, text=True,
                                  timeout=1800)
            text = done.stdout + "".join(line + "\n" for line in done.stderr.splitlines()
                                         if line.strip())
            # the private home reads as a user's
            text = text.replace(str(env["HOME"]), "~")
            if output.cut is not None and k == len(output.commands) - 1:
                text = output.cut(text, folder)
            if k in output.elide:
                text = "\n".join(["..."] + [line for line in text.splitlines()
                                            if line.startswith("wrote ")])
            if output.show is None or k in output.show:
                shown.append(f"$ {command}\n" + "\n".join(
                    line.rstrip() for line in text.strip("\n").splitlines()))
        return "\n".join(shown) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="names of OUTPUTS to regenerate")
    parser.add_argument("--quick", action="store_true", help="only the outputs not marked slow")
    args = parser.parse_args(argv)
    # the reference pages first: they take a second
    for path in write_all():
        print(f"wrote {path.relative_to(ROOT)}", flush=True)
    OUT_DIR.mkdir(exist_ok=True)
    names = {o.name for o in OUTPUTS}
    unknown = set(args.only or ()) - names
    if unknown:
        parser.error(f"unknown output(s) {sorted(unknown)}; allowed: {sorted(names)}")
    with tempfile.TemporaryDirectory(prefix="fabricjax-docs-home-") as home:
        for output in OUTPUTS:
            if args.only is not None and output.name not in args.only:
                continue
            if args.quick and output.slow:
                continue
            path = OUT_DIR / f"{output.name}.txt"
            path.write_text(run(output, Path(home)))
            print(f"wrote {path.relative_to(ROOT)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
