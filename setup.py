"""The one packaging rule pyproject.toml cannot state: find every package under fabricjax/ and
add the command-line app from cli/ under the name `fabricjax_cli`, with the bundled data files
(the parts catalog); the metadata is in pyproject.toml."""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["fabricjax", "fabricjax.*"]) + ["fabricjax_cli"],
      package_dir={"fabricjax_cli": "cli"},
      package_data={"fabricjax": ["data/*.yaml"]})
