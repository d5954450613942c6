"""Bytes and connections: frames (frames.py, and its C twin _frames.c), the messages in
them (wire.py; a client's APPEND in appends.py; DLedger's JSON dialect in dialect.py), the
asyncio transport (transport.py: the frame connection; server.py with its limits;
channel.py, the pipelining client side), TLS identities (tls.py) and CRL reading (crl.py;
the CA that writes certificates and CRLs is cluster/node/pki.py), the client (client.py;
paging.py reads ranges and follows the log with it).

Sans-I/O where it decodes (frames.py, wire.py, appends.py, dialect.py: bytes in, messages
out); asyncio only in transport.py, server.py, channel.py, client.py and paging.py.

May import: ``store``'s formats, and from cluster/raft only its message types (rpc.py) and
its peer and setting types (config.py). Never cluster/node.
"""
