"""The `flinkpy` command-line tool: a typer app, one module per command group.

Layers import downward: this package uses ``flinkpy``; ``flinkpy`` never imports it.
"""
