"""The package version (one place; `fabricjax.__version__` and reports read it)."""

__version__ = "0.1.0"
