"""Bytes and connections: the frame codec (wire.py, and its C twin _frames.c), DLedger's
JSON dialect, the asyncio transport and its limits, TLS identities and certificates, the
client.

Sans-I/O where it decodes (wire.py, dialect.py: bytes in, messages out); asyncio only in
transport.py and client.py.

May import: ``store``'s formats, and from cluster/raft only its message types (rpc.py) and
its peer and setting types (config.py). Never cluster/node.
"""
