"""The docs cannot go stale: every output they show is what the code prints now, the generated
reference pages are what the models and the app say now, the site builds with --strict, the
README stays a front page, and the notebook in examples/ runs.

The cheap outputs are rerun here; the expensive ones (whole analyses of the bundled
scenarios) are marked slow. A comparison masks only what no two honest runs share (seconds,
versions, the cache's contents: `docs/generate.py`'s MASKS).
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS))
import generate  # noqa: E402  (docs/generate.py: the one script that writes the outputs)
import reference_pages as reference  # noqa: E402

ISSUE_NUMBER = re.compile(r"\bissues?\s*#?\d+", re.IGNORECASE)
SNIPPET = re.compile(r'^\s*--8<-- "([^"]+)"', re.MULTILINE)


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _committed(output: generate.Output) -> str:
    return (generate.OUT_DIR / f"{output.name}.txt").read_text()


def _differs(committed: str, fresh: str) -> list[str]:
    """The lines where two outputs differ once masked (empty when they agree)."""
    old, new = generate.mask(committed).splitlines(), generate.mask(fresh).splitlines()
    if len(old) != len(new):
        return [f"{len(old)} lines committed, {len(new)} printed now"]
    return [f"committed: {a}\nprinted:   {b}" for a, b in zip(old, new) if a != b]


# ------------------------------------------------------------------------- the front page

def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for needed in ("make demo", "make test", "make docs", "docs/getting-started.md"):
        assert needed in text


def test_no_issue_numbers_in_the_readme_the_docs_the_changelog_or_the_code():
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *_pages(), *DOCS.glob("*.py"),
             *(ROOT / "examples").glob("*.py"), *(ROOT / "fabricjax").rglob("*.py"),
             *(ROOT / "cli").rglob("*.py"), ROOT / "Makefile"]
    found = [f"{path.relative_to(ROOT)}: {m.group(0)}" for path in files
             for m in ISSUE_NUMBER.finditer(path.read_text())]
    assert not found, found


def test_the_readme_example_is_the_generated_output():
    """The README cannot include files, so its worked example is pasted: it must be the
    generated quickstart output, byte for byte."""
    shown = _committed(next(o for o in generate.OUTPUTS if o.name == "quickstart"))
    assert "```\n" + shown + "```" in (ROOT / "README.md").read_text()


def test_the_changelog_keeps_a_changelog():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog")
    assert "## [Unreleased]" in text
    assert re.search(r"^## \[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}$", text, re.MULTILINE)


# --------------------------------------------------------------------- the shown outputs

def test_every_included_file_exists_and_every_output_is_shown():
    included = {m.group(1) for page in _pages() for m in SNIPPET.finditer(page.read_text())}
    missing = sorted(path for path in included if not (ROOT / path).is_file())
    assert not missing, missing
    for output in generate.OUTPUTS:
        assert f"docs/outputs/{output.name}.txt" in included, f"{output.name} is shown nowhere"
        assert _committed(output).startswith(f"$ {output.commands[output.show[0] if output.show else 0]}\n")
    stray = {p.name for p in generate.OUT_DIR.iterdir()} - {
        f"{o.name}.txt" for o in generate.OUTPUTS}
    assert not stray, f"outputs no command writes: {sorted(stray)}"


def test_every_fabricjax_block_in_the_pages_is_an_included_output():
    """A page shows a command's output only through docs/outputs/: no `$ fabricjax` pasted by
    hand into a code block."""
    pasted = [f"{page.relative_to(ROOT)}: {line}" for page in _pages()
              for line in page.read_text().splitlines() if line.startswith("$ fabricjax")]
    assert not pasted, pasted


@pytest.mark.parametrize("output", [o for o in generate.OUTPUTS if not o.slow],
                         ids=lambda o: o.name)
def test_cheap_outputs_are_what_the_code_prints(output):
    assert not _differs(_committed(output), generate.run(output)), \
        f"docs/outputs/{output.name}.txt is stale: run `python docs/generate.py --only {output.name}`"


@pytest.mark.slow
@pytest.mark.parametrize("output", [o for o in generate.OUTPUTS if o.slow],
                         ids=lambda o: o.name)
def test_expensive_outputs_are_what_the_code_prints(output):
    assert not _differs(_committed(output), generate.run(output)), \
        f"docs/outputs/{output.name}.txt is stale: run `python docs/generate.py --only {output.name}`"


def test_an_edited_output_is_caught():
    """The check fails when a committed output is edited: one digit of a real run's error
    line, then a digit inside a table row (the masks hide seconds and versions, not
    results)."""
    output = next(o for o in generate.OUTPUTS if o.name == "bad-yaml")
    fresh = generate.run(output)
    assert not _differs(_committed(output), fresh)
    assert _differs(fresh.replace("63", "65"), fresh)
    table = _committed(next(o for o in generate.OUTPUTS if o.name == "topo-quickstart"))
    edited = re.sub(r"1,024", "1,025", table, count=1)
    assert edited != table and _differs(edited, table)
    timing = "4 point(s) in 9.8 s\n"
    assert not _differs(timing, timing.replace("9.8", "41.3"))


# ------------------------------------------------------------------ generated references

@pytest.mark.parametrize("name", sorted(reference.PAGES))
def test_reference_pages_are_current(name):
    committed = (reference.REFERENCE / name).read_text()
    assert committed == reference.PAGES[name](), \
        f"docs/reference/{name} is stale: run `python docs/generate.py --only`"


def test_the_scenario_reference_covers_every_field():
    """Every field of every section of the schema has its row, so a new field cannot be left
    out of the docs."""
    schema = reference.scenario_schema()
    page = reference.scenario_reference()
    sections = [schema, *schema["$defs"].values()]
    for section in sections:
        for name in reference.object_schema(section).get("properties", {}):
            assert f"| `{name}` |" in page, name
    # the policies' own sections (`mrc: {evs: 128}`) have theirs too
    for policy in ("ecmp", "spray", "mrc", "optimal"):
        assert f"### `{policy}`" in page and f"| `{policy}` |" in page


def test_no_section_of_the_scenario_reference_has_an_empty_field_table():
    page = reference.scenario_reference()
    for block in page.split("\n### ")[1:]:
        title = block.splitlines()[0]
        rows = [line for line in block.splitlines() if line.startswith("| `")]
        assert rows or "Allowed values: `" in block, f"empty field table: {title}"


def test_the_cli_reference_covers_every_option():
    import typer.main
    from fabricjax_cli.main import app
    group = typer.main.get_command(app)
    page = reference.cli_reference()
    ctx = group.context_class(group, info_name="fabricjax")
    for name in group.list_commands(ctx):
        assert f"## fabricjax {name}" in page
        for param in group.get_command(ctx, name).params:
            if param.param_type_name == "option":
                assert f"`{param.opts[0]}`" in page, (name, param.opts)


# ----------------------------------------------------------------------------- the build

def test_the_site_builds_strict(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "scenario" / "index.html").is_file()


# --------------------------------------------------------------------------- the notebook

@pytest.mark.slow   # 70 s of CPU with an empty compilation cache: a program per EV count
def test_the_planning_notebook_runs(tmp_path):
    """examples/plan_fabric.py, executed as a script on a small fabric (what a notebook user
    runs cell by cell): it must end, print its tables and save its figure."""
    if importlib.util.find_spec("fabricjax.api") is None:
        pytest.skip("fabricjax.api is not in this checkout: the notebook needs the Python API")
    env = dict(os.environ, FABRICJAX_EXAMPLE_SMALL="1", MPLBACKEND="Agg",
               FABRICJAX_EXAMPLE_OUT=str(tmp_path),
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "plan_fabric.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "P100" in done.stdout
    assert (tmp_path / "tradeoff.png").stat().st_size > 0


def test_every_dynamic_constant_has_its_source_in_the_model_page():
    """docs/model.md's table of the dynamic level's constants names every module constant of
    the two dynamic modules, each with its source (htsim, a measurement or "no figure
    moves"), and none is left unsourced."""
    page = (DOCS / "model.md").read_text()
    start = page.index("### Where the dynamic level's constants come from")
    table = page[start:page.index("\n## ", start)]
    rows = dict(re.findall(r"^\| ([A-Z][A-Z_0-9]+) \|.*\| ([^|]+) \|$", table, re.M))
    for module in ("fabricjax/solver/dynamic.py", "fabricjax/engine/dynamic.py"):
        source = (ROOT / module).read_text()
        for name in re.findall(r"^([A-Z][A-Z_0-9]+) *=", source, re.M):
            assert name in rows, f"{module}: {name} has no row in docs/model.md"
    # a row's source starts with one of the table's kinds of source
    kinds = re.compile(r"\s*(htsim|measured|no figure moves)")
    assert not [name for name, why in rows.items() if not kinds.match(why)]
