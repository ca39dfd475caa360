"""Sockets between flinkpy's processes: framing, authentication, control connections, data channels.

Layers (each imports only those above it): ``framing`` -> ``auth`` -> ``connection`` ->
``credit`` (pure) -> ``channels``.
"""
