"""The package's layering (README, "Layout"), enforced on the source.

Walks the AST of every module of `fabricjax/` and `cli/` and fails on: an import of a layer
above (or of another folder of the same layer), an import that runs against a folder's
declared order, a `fabricjax` import inside a function (only `cli/` may defer them, to keep
`--help` instant; the package root loads the API on first use instead), a private name imported from another module, and a private attribute of
another module's object touched. Then checks that `import fabricjax.report` and `fabricjax
topo` never import JAX.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# module prefix -> layer; the first matching prefix wins (longest first)
LAYERS = {
    "fabricjax": 12,        # the package root re-exports the API; nothing imports it
    "fabricjax.core": 0,
    "fabricjax.config": 1, "fabricjax.results": 1,
    "fabricjax.fabric": 2, "fabricjax.workload": 2,
    "fabricjax.scenario": 3, "fabricjax.solver": 3,
    "fabricjax.policies": 4, "fabricjax.handle": 4,
    "fabricjax.engine": 5,
    "fabricjax.metrics": 6,
    "fabricjax.study": 7,
    "fabricjax.report": 8,
    "fabricjax.sweeps": 9,   # grids run through the studies, rendered by the report
    "fabricjax.api": 10,    # the Python API: the calls the CLI makes too
    "fabricjax.plot": 10,   # the API's figures (report.plots, returned unsaved)
    "cli": 11,
}
# inside a folder, a module imports only the ones before it ("__init__" last: the registry)
ORDER = {
    "fabricjax.core": ["version", "lazy", "errors", "status", "registry", "units", "output",
                       "stream", "devices", "jax_internals", "executables"],
    "fabricjax.fabric": ["spec", "clos", "graphfile", "fattree", "ksp", "graph", "paths", "build",
                         "failures", "bom"],
    "fabricjax.workload": ["flows", "traffic_matrix", "traffic_csv", "traffic_npz",
                           "traffic_htsim", "traffic", "et", "collectives", "training", "chakra",
                           "build"],
    "fabricjax.solver": ["maxmin", "incidence", "progressive", "aggregate", "gradients",
                         "mirror_prox", "dynamic"],
    "fabricjax.policies": ["base", "ecmp", "spray", "mrc", "optimal", "__init__"],
    "fabricjax.engine": ["plan", "timing", "phase", "batch", "dynamic"],
    "fabricjax.study": ["sharing", "resilience", "sensitivity", "analyze"],
    "fabricjax.report": ["json", "layout", "tables", "sweep", "console", "topo", "design",
                         "plots"],
    "fabricjax.sweeps": ["grid", "run", "design", "__init__"],
}
# public standard-library names that start with an underscore: named tuples' API, os._exit
PUBLIC_UNDERSCORE = {"_replace", "_fields", "_asdict", "_make", "_field_defaults", "_exit"}


def modules() -> list[tuple[str, Path]]:
    out = []
    for root in ("fabricjax", "cli"):
        for path in sorted((REPO / root).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out.append((name, path))
    return out


def layer(module: str) -> int:
    for prefix in sorted(LAYERS, key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            return LAYERS[prefix]
    raise KeyError(module)


def folder(module: str) -> str:
    """The layered folder a module sits in ("fabricjax.fabric"), or the module itself."""
    for prefix in ORDER:
        if module == prefix or module.startswith(prefix + "."):
            return prefix
    return module


def position(module: str, is_package: bool) -> int:
    base = folder(module)
    leaf = "__init__" if is_package else module.rsplit(".", 1)[-1]
    if leaf not in ORDER[base]:    # a package's docstring-only __init__ comes first
        return -1
    return ORDER[base].index(leaf)


def fabricjax_imports(tree: ast.AST) -> list[tuple[ast.AST, str, list[str], bool]]:
    """(node, imported module, names, inside a function) of every fabricjax import."""
    found = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                       ast.Lambda))
            if isinstance(child, ast.ImportFrom) and child.module and (
                    child.module == "fabricjax" or child.module.startswith("fabricjax.")):
                names = [a.name for a in child.names]
                targets = ([f"{child.module}.{n}" for n in names] if child.module in ORDER or
                           child.module == "fabricjax" else [child.module])
                for target in targets:
                    found.append((child, target, names, in_function))
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.name.split(".")[0] == "fabricjax":
                        found.append((child, alias.name, [], in_function))
            visit(child, nested)

    visit(tree, False)
    return found


def known(module: str) -> str:
    """`module` if it is a module of the package, else its parent (a name imported from a
    package's __init__, such as `fabricjax.policies.get`)."""
    names = {name for name, _ in modules()}
    return module if module in names else module.rsplit(".", 1)[0]


def violations() -> list[str]:
    problems = []
    for name, path in modules():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        here = layer(name)
        for node, target, names, in_function in fabricjax_imports(tree):
            target = known(target)
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            # only the CLI defers the studies (JAX) until a computation runs
            if in_function and here < LAYERS["cli"]:
                problems.append(f"{where}: imports {target} inside a function")
            if any(n.startswith("_") and not n.startswith("__") for n in names):
                problems.append(f"{where}: imports a private name from {target}: {names}")
            if target == name:
                continue
            there = layer(target)
            if there > here:
                problems.append(f"{where}: layer {here} imports {target} (layer {there})")
            elif there == here:
                if folder(target) != folder(name) or folder(name) not in ORDER:
                    problems.append(f"{where}: imports {target}, another module of its layer")
                elif position(target, target in ORDER) >= position(name, is_package):
                    problems.append(f"{where}: imports {target}, which comes after it in "
                                    f"{folder(name)}'s order {ORDER[folder(name)]}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                    and not node.attr.startswith("__") and node.attr not in PUBLIC_UNDERSCORE
                    and not (isinstance(node.value, ast.Name)
                             and node.value.id in ("self", "cls"))):
                problems.append(f"{path.relative_to(REPO)}:{node.lineno}: touches the private "
                                f"attribute {node.attr}")
    return problems


def test_layers_hold():
    problems = violations()
    assert not problems, "\n".join(problems)


def test_the_checker_sees_a_violation(tmp_path, monkeypatch):
    """A planted upward import, in-function import and private import are all caught."""
    fake = tmp_path / "fabricjax" / "core"
    fake.mkdir(parents=True)
    (fake / "units.py").write_text(
        "from fabricjax.study.analyze import analyze\n"
        "from fabricjax.core.errors import _private\n"
        "def f():\n    from fabricjax.core import errors\n")
    (tmp_path / "cli").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    problems = "\n".join(violations())
    assert "fabricjax/core/units.py:1: layer 0 imports fabricjax.study" in problems
    assert "inside a function" in problems
    assert "private name" in problems


def _without_jax(code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), JAX_PLATFORMS="cpu")
    check = "\nimport sys\nassert 'jax' not in sys.modules, sorted(m for m in sys.modules if m.startswith('jax'))[:5]\n"
    return subprocess.run([sys.executable, "-c", code + check], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_report_never_imports_jax():
    proc = _without_jax("import fabricjax.report.tables, fabricjax.report.json, "
                        "fabricjax.report.topo, fabricjax.report.plots, fabricjax.results, "
                        "fabricjax.report.layout, fabricjax.report.sweep, "
                        "fabricjax.report.console, fabricjax, fabricjax.plot")
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("scenario", ["quickstart.yaml", "fat-tree-3tier.yaml"])
def test_topo_never_imports_jax(scenario):
    proc = _without_jax(
        "import sys\nfrom fabricjax_cli.main import app\n"
        f"try:\n    app(['topo', 'scenarios/{scenario}'])\nexcept SystemExit as exit:\n"
        "    assert not exit.code, exit.code\n")
    assert proc.returncode == 0, proc.stderr + proc.stdout
