"""The wheel installs cleanly: the package and its command-line app under names of their own
(no top-level `cli` in site-packages to collide with another project's), every module of the
source tree is in it (the packages are found, not listed), and the installed `fabricjax`
script runs from a fresh environment."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel built from a copy of the tracked files alone (a checkout's own build/ folder
    may hold modules that no longer exist, and setuptools would pack them)."""
    source = tmp_path_factory.mktemp("source")
    tracked = subprocess.run(["git", "ls-files", "pyproject.toml", "setup.py", "README.md",
                              "fabricjax", "cli"], cwd=REPO, capture_output=True, text=True,
                             check=True).stdout.split()
    for name in tracked:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(source)],
        capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr
    (found,) = dist.glob("fabricjax-*.whl")
    return found


def source_modules() -> set[str]:
    """Every module of the tracked source tree as the wheel names it (cli/ as fabricjax_cli/)."""
    listed = subprocess.run(["git", "ls-files", "fabricjax", "cli"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split()
    return {("fabricjax_cli" + name[len("cli"):]) if name.startswith("cli/") else name
            for name in listed if name.endswith(".py")}


def test_the_wheel_holds_every_module(wheel):
    modules = source_modules()
    assert "fabricjax/engine/plan.py" in modules and "fabricjax_cli/main.py" in modules
    packed = {name for name in zipfile.ZipFile(wheel).namelist() if name.endswith(".py")}
    assert modules - packed == set(), "modules missing from the wheel"
    assert packed - modules == set(), "modules in the wheel but not in the source tree"
    # the parts catalog the design search prices with travels as package data
    assert "fabricjax/data/catalog.yaml" in zipfile.ZipFile(wheel).namelist()


def test_wheel_installs_into_a_fresh_environment(wheel, tmp_path):
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert "fabricjax" in tops and "fabricjax_cli" in tops
    assert "cli" not in tops and "tests" not in tops and "bench" not in tops

    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps",
                              "--no-index", str(wheel)], capture_output=True, text=True,
                             timeout=300)
    assert install.returncode == 0, install.stderr
    # the dependencies come from this test's environment (PYTHONPATH: no .pth files run, so
    # its editable install of the checkout stays out), the package from the wheel
    deps = sysconfig.get_paths()["purelib"]
    env = dict(os.environ, PYTHONPATH=deps)
    run = subprocess.run([str(env_dir / "bin" / "fabricjax"), "--version"], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith("fabricjax ")
    where = subprocess.run([str(python), "-c", "import fabricjax_cli, fabricjax; "
                            "print(fabricjax_cli.__file__); print(fabricjax.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
    assert where.returncode == 0, where.stderr
    assert all(str(env_dir) in line for line in where.stdout.split()), where.stdout
