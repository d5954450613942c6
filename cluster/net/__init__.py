"""Bytes and connections: frames (frames.py, and its C twin _frames.c), the messages in
them (wire.py: the codes and the peer messages; dialect.py: DLedger's JSON for Java peers;
api.py: client and operator requests and answers, typed and decoded once; api_client.py:
what a client sends and reads back; answers.py: the answers the client returns typed), the
asyncio transport (transport.py: the frame connection; server.py with its limits;
channel.py, the pipelining client side), TLS identities (tls.py) and CRL reading (crl.py;
the CA that writes certificates and CRLs is cluster/node/pki.py), the client (client.py;
paging.py reads ranges and follows the log with it).

Sans-I/O where it decodes (frames.py, wire.py, dialect.py, api.py, api_client.py,
answers.py: bytes in, messages out); asyncio only in transport.py, server.py, channel.py,
client.py and paging.py.

May import: ``store``'s formats, and from cluster/raft only its message types (rpc.py) and
its peer and setting types (config.py). Never cluster/node.
"""
