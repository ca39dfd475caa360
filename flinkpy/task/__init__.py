"""The task process: input channels, the operator chain, record writers.

One concept per module: ``process`` (the entry point), ``task`` (wires the parts and walks them
through the task's life), ``control`` (the control handler: checkpoint triggers and
notifications, injected faults), ``source_loop`` (a source task's loop), ``input_processor``
(every other task's loop: input channels, barrier alignment, watermarks), ``barriers`` and
``watermarks`` (their pure state machines), ``chain`` and ``operators``, ``record_writer``,
``checkpointing`` (the snapshot and its asynchronous upload), ``fault_points`` and
``fault_injection`` (deliberate crashes for tests and for `flinkpy fault`).
"""
