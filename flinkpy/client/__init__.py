"""Clients of a flinkpy cluster (the REST client, the program runner).

Kept free of imports so that importing a submodule costs only that submodule.
"""
