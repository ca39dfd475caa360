"""A job program as the runtime meets it: the execution context its ``execute()`` runs in
(where it submits, or that only its plan is wanted), the Python files it ships with
(``python.files``), and running its file with the user's arguments.

This sits low in the layers (tests/test_layers.py): the Spark runner and the client both run
job programs, and the DataStream API reads the context, so none of them may own it.
"""
