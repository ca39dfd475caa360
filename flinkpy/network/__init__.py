"""Sockets between flinkpy's processes: framing, authentication, control connections, data channels.

Layers (each imports only those above it): ``framing`` -> ``auth`` -> ``connection`` (which
encodes and decodes :mod:`flinkpy.protocol` messages) -> ``credit`` (pure) -> ``channels``.
"""
