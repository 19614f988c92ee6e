"""The `fabricjax` command line: a thin typer app over the fabricjax library."""
