"""A node's Prometheus metrics (``node start --metrics-address HOST:PORT``).

What happens on the hot path is counted in plain integers on the event loop (no lock: the
loop is one thread): appends, their bytes and latency, flushes, refusals, leader changes.
Everything else (role, term, indexes, each follower's watermark and lag, disk usage) is
read from live state when Prometheus scrapes. prometheus_client's HTTP server answers the
scrape in a thread of its own; it asks the loop for the values (``call_soon_threadsafe``)
and waits for them, so one scrape sees one consistent moment and nothing is read while the
loop changes it.

Every metric carries the labels ``group`` and ``node``. :data:`CATALOGUE` lists them all;
the man page (dledgerctl-node(1), METRICS) documents the same list and a test keeps the two
and the endpoint in step.
"""

from __future__ import annotations

import concurrent.futures
import logging
from bisect import bisect_left

log = logging.getLogger("dledgerctl.node")

# seconds; appends are answered in about a millisecond on a quiet group, flushes take
# tens of microseconds (page cache) to tens of milliseconds (a busy disk)
LATENCY_BUCKETS = (0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
ROLES = ("leader", "follower", "candidate")
SCRAPE_WAIT_S = 5.0  # a loop this busy is itself the news: the scrape shows the process metrics only

# name, type, extra labels, help
CATALOGUE: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("dledger_node_info", "gauge", ("version", "flush"), "Always 1; the labels say the version and flush policy."),
    ("dledger_role", "gauge", ("role",), "1 for the role this node has now (leader, follower, candidate), else 0."),
    ("dledger_term", "gauge", (), "The current term."),
    ("dledger_leader_changes_total", "counter", (),
     "Leaders this node has come to know: each new term's leader, itself included."),
    ("dledger_members", "gauge", ("member",), "Members of the group by kind (voter, learner), as this node knows them."),
    ("dledger_entries", "gauge", (), "Entries the log holds (end index - begin index + 1)."),
    ("dledger_begin_index", "gauge", (), "The first entry of the log (-1 when empty)."),
    ("dledger_end_index", "gauge", (), "The last entry of the log (-1 when empty)."),
    ("dledger_committed_index", "gauge", (), "The last entry known to be committed."),
    ("dledger_applied_index", "gauge", (), "With --state-machine: the last entry applied."),
    ("dledger_snapshot_index", "gauge", (), "With --state-machine: the entry the newest snapshot covers (-1: none)."),
    ("dledger_snapshots", "gauge", (), "With --state-machine: snapshots kept on disk."),
    ("dledger_apply_latency_seconds", "histogram", (),
     "With --state-machine: how long each batch of committed entries took to apply."),
    ("dledger_snapshot_save_seconds", "histogram", (),
     "With --state-machine: how long each snapshot took to serialise and write (in its thread)."),
    ("dledger_snapshot_load_seconds", "gauge", (),
     "With --state-machine: how long restoring the latest snapshot took at start."),
    ("dledger_snapshot_install_seconds", "histogram", (),
     "Follower: how long placing and restoring a snapshot the leader sent took."),
    ("dledger_pending_appends", "gauge", (), "Leader: appended batches waiting for the quorum."),
    ("dledger_append_requests_total", "counter", ("code",),
     "APPEND requests answered, by response code (SUCCESS, NOT_LEADER, LEADER_PENDING_FULL, ...)."),
    ("dledger_appended_entries_total", "counter", (), "Entries clients appended that this node, as leader, committed."),
    ("dledger_appended_bytes_total", "counter", (), "Body bytes of those entries."),
    ("dledger_append_latency_seconds", "histogram", (),
     "Leader: committed APPENDs, from the event-loop pass they arrived in to their answer."),
    ("dledger_read_latency_seconds", "histogram", (), "How long each GET took to answer (read and encode)."),
    ("dledger_received_entries_total", "counter", (), "Follower: entries taken from the leader's pushes."),
    ("dledger_received_bytes_total", "counter", (), "Follower: bytes of those entries."),
    ("dledger_push_refused_total", "counter", ("reason",),
     "Follower: pushes refused, by reason (position: an entry is not where this log would put it, most often "
     "data files of another size than the leader's; the node's log says the fix)."),
    ("dledger_replicated_entries_total", "counter", ("peer",), "Leader: entries each follower acknowledged from pushes."),
    ("dledger_replicated_bytes_total", "counter", ("peer",), "Leader: bytes of those entries."),
    ("dledger_replicate_latency_seconds", "histogram", ("peer",),
     "Leader: from sending a push of entries to each follower to its acknowledgement."),
    ("dledger_peer_match_index", "gauge", ("peer",), "Leader: the last entry each follower acknowledged."),
    ("dledger_peer_next_index", "gauge", ("peer",), "Leader: the next entry it will push to each follower."),
    ("dledger_peer_lag_entries", "gauge", ("peer",), "Leader: entries each follower lacks (end index - match index)."),
    ("dledger_peer_lag_bytes", "gauge", ("peer",), "Leader: bytes of the entries each follower lacks."),
    ("dledger_peer_lag_seconds", "gauge", ("peer",),
     "Leader: the age of the oldest entry each follower lacks (0 when it has them all)."),
    ("dledger_peer_alive", "gauge", ("peer",), "Leader: 1 when the follower answered within the election timeout."),
    ("dledger_peer_state", "gauge", ("peer", "state"),
     "Leader: 1 for each follower's dispatcher state (COMPARE, TRUNCATE, APPEND, COMMIT, INSTALL_SNAPSHOT, REPAIR)."),
    ("dledger_peer_in_flight_pushes", "gauge", ("peer",), "Leader: pushes sent to each follower and not yet answered."),
    ("dledger_peer_in_flight_bytes", "gauge", ("peer",), "Leader: bytes of those pushes."),
    ("dledger_flush_latency_seconds", "histogram", (), "How long each flush (fdatasync of the written files) took."),
    ("dledger_flush_failures_total", "counter", (), "Flushes that failed (appends waiting for them stay unanswered)."),
    ("dledger_disk_usage_ratio", "gauge", (), "Used share of the store's file system, as df shows it."),
    ("dledger_disk_ratio_limit", "gauge", ("kind",),
     "This node's disk usage thresholds (kind: check, expired files deleted at any hour; force, the oldest deleted "
     "whatever their age; full, appends refused)."),
    ("dledger_store_files", "gauge", ("kind",), "Files of the store (kind: data, index)."),
    ("dledger_store_file_bytes", "gauge", ("kind",), "Bytes those files take (file count x file size)."),
    ("dledger_refused_requests_total", "counter", ("code",),
     "Requests answered with a refusal, by code (NOT_LEADER, INDEX_OUT_OF_RANGE, NO_PERMISSION, BAD_REQUEST, ...); "
     "refused APPENDs are in dledger_append_requests_total too."),
    ("dledger_connections", "gauge", (), "Open client and peer connections to this node."),
    ("dledger_connections_closed_total", "counter", ("reason",),
     "Connections the node closed by its limits (reason: limit, idle, slow)."),
    ("dledger_recovery_dropped_entries", "gauge", (), "Entries recovery dropped from the log when this node started."),
    ("dledger_recovery_dropped_committed_entries", "gauge", (),
     "Of those, entries the checkpoint had recorded as committed (they must come back from the leader)."),
    ("dledger_scrub_bytes_total", "counter", (), "Bytes of committed entries the background scrub has checked."),
    ("dledger_scrub_passes_total", "counter", (), "Full passes of the scrub over the committed log."),
    ("dledger_scrub_last_pass_timestamp_seconds", "gauge", (),
     "When the scrub last finished a pass (Unix time; 0 before its first)."),
    ("dledger_scrub_damage_found_total", "counter", ("kind",),
     "Damaged entries the scrub found, by kind (body-crc, chain-crc, header, index-record, differs)."),
    ("dledger_scrub_damage_repaired_total", "counter", ("kind",), "Of those, entries it repaired, by kind."),
    ("dledger_scrub_damage_unrepaired_total", "counter", ("kind",),
     "Repairs given up for the pass (no copy to repair from, or none that checks), by kind."),
    ("dledger_scrub_damaged_entries", "gauge", (), "Entries this member holds damaged and has not repaired yet."),
    ("dledger_tls_certificate_expiry_timestamp_seconds", "gauge", (),
     "With TLS: when the certificate this node shows expires (Unix time; a SIGHUP reload updates it)."),
)


class Buckets:
    """A histogram kept as counts per bucket: ``observe(v, n)`` counts ``n`` observations of
    ``v`` at once (every APPEND of one batch waited as long)."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds=LATENCY_BUCKETS) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, n: int = 1) -> None:
        self.counts[bisect_left(self.bounds, value)] += n
        self.sum += value * n

    def cumulative(self) -> list[tuple[str, int]]:
        out, total = [], 0
        for le, c in zip((*map(repr, self.bounds), "+Inf"), self.counts):
            total += c
            out.append((le, total))
        return out


class Counts:
    """What the node counts as it goes (on the loop; plain integers)."""

    def __init__(self) -> None:
        self.append_requests: dict[str, int] = {"SUCCESS": 0}  # (a series from the start: rate() sees the first)
        self.appended_entries = 0
        self.appended_bytes = 0
        self.append_latency = Buckets()
        self.flush_latency = Buckets()
        self.flush_failures = 0
        self.refused: dict[str, int] = {}
        self.leader_changes = 0
        self.recovery_dropped = (0, 0)
        self.read_latency = Buckets()
        self.apply_latency = Buckets()
        self.snapshot_save = Buckets()
        self.snapshot_install = Buckets()
        self.snapshot_load: float | None = None
        self.received_entries = 0
        self.received_bytes = 0
        self.replicated: dict[str, list] = {}  # peer -> [entries, bytes, Buckets of push latency]

    def replicated_to(self, peer: str, seconds: float, entries: int, nbytes: int) -> None:
        r = self.replicated.get(peer)
        if r is None:
            r = self.replicated[peer] = [0, 0, Buckets()]
        r[0] += entries
        r[1] += nbytes
        r[2].observe(seconds)

    def refusal(self, code: str, n: int = 1) -> None:
        self.refused[code] = self.refused.get(code, 0) + n

    def appends_answered(self, code: str, n: int) -> None:
        """``n`` APPENDs answered with ``code``; a refusal counts among the refusals too."""
        self.append_requests[code] = self.append_requests.get(code, 0) + n
        if code != "SUCCESS":
            self.refusal(code, n)


def families(state: dict, counts: Counts, labels: dict[str, str]) -> list:
    """The metric families for one scrape, from ``state`` (read on the loop, see
    Node.metrics_state) and ``counts``."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

    kinds = {"gauge": GaugeMetricFamily, "counter": CounterMetricFamily, "histogram": HistogramMetricFamily}
    base = list(labels)
    made = {}
    for name, kind, extra, doc in CATALOGUE:
        fam_name = name[:-len("_total")] if kind == "counter" else name
        made[name] = kinds[kind](fam_name, doc, labels=base + list(extra))
    values = list(labels.values())

    def put(name: str, value, *extra) -> None:
        made[name].add_metric(values + [str(e) for e in extra], value)

    put("dledger_node_info", 1, state["version"], state["flush"])
    for r in ROLES:
        put("dledger_role", 1 if state["role"] == r else 0, r)
    put("dledger_term", state["term"])
    put("dledger_leader_changes_total", counts.leader_changes)
    for kind, n in state["members"].items():
        put("dledger_members", n, kind)
    put("dledger_entries", 0 if state["begin_index"] < 0 else state["end_index"] - state["begin_index"] + 1)
    for k in ("begin_index", "end_index", "committed_index", "pending_appends"):
        put(f"dledger_{k}", state[k])
    for k in ("applied_index", "snapshot_index", "snapshots"):
        if k in state:
            put(f"dledger_{k}", state[k])
    if "applied_index" in state:  # (with a state machine)
        for name, b in (("dledger_apply_latency_seconds", counts.apply_latency),
                        ("dledger_snapshot_save_seconds", counts.snapshot_save)):
            made[name].add_metric(values, b.cumulative(), b.sum)
        if counts.snapshot_load is not None:
            put("dledger_snapshot_load_seconds", counts.snapshot_load)
    b = counts.snapshot_install
    made["dledger_snapshot_install_seconds"].add_metric(values, b.cumulative(), b.sum)
    b = counts.read_latency
    made["dledger_read_latency_seconds"].add_metric(values, b.cumulative(), b.sum)
    put("dledger_received_entries_total", counts.received_entries)
    put("dledger_received_bytes_total", counts.received_bytes)
    for reason, n in sorted({"position": 0, **state.get("push_refused", {})}.items()):  # (a series from the start)
        put("dledger_push_refused_total", n, reason)
    for row in state["peers"]:  # (every follower's series from the start: rate() sees the first push)
        if row["peer"] not in counts.replicated:
            counts.replicated[row["peer"]] = [0, 0, Buckets()]
    for peer, (entries, nbytes, b) in sorted(counts.replicated.items()):
        put("dledger_replicated_entries_total", entries, peer)
        put("dledger_replicated_bytes_total", nbytes, peer)
        made["dledger_replicate_latency_seconds"].add_metric(values + [peer], b.cumulative(), b.sum)
    for code, n in sorted(counts.append_requests.items()):
        put("dledger_append_requests_total", n, code)
    put("dledger_appended_entries_total", counts.appended_entries)
    put("dledger_appended_bytes_total", counts.appended_bytes)
    for name, b in (("dledger_append_latency_seconds", counts.append_latency),
                    ("dledger_flush_latency_seconds", counts.flush_latency)):
        made[name].add_metric(values, b.cumulative(), b.sum)
    for row in state["peers"]:
        p = row["peer"]
        put("dledger_peer_match_index", row["watermark"], p)
        put("dledger_peer_next_index", row["next_index"], p)
        put("dledger_peer_lag_entries", row["lag_entries"], p)
        put("dledger_peer_lag_bytes", row["lag_bytes"], p)
        put("dledger_peer_lag_seconds", row["lag_ms"] / 1000, p)
        put("dledger_peer_alive", 1 if row["alive"] else 0, p)
        for s in state["dispatch_states"]:
            put("dledger_peer_state", 1 if row["state"] == s else 0, p, s)
        put("dledger_peer_in_flight_pushes", row["in_flight"], p)
        put("dledger_peer_in_flight_bytes", row["in_flight_bytes"], p)
    put("dledger_flush_failures_total", counts.flush_failures)
    if state["disk_usage"] is not None:
        put("dledger_disk_usage_ratio", state["disk_usage"])
    for kind, ratio in state["disk_limits"].items():
        put("dledger_disk_ratio_limit", ratio, kind)
    if state.get("cert_expiry") is not None:
        put("dledger_tls_certificate_expiry_timestamp_seconds", state["cert_expiry"])
    for kind, (files, size) in state["store_files"].items():
        put("dledger_store_files", files, kind)
        put("dledger_store_file_bytes", files * size, kind)
    for code, n in sorted(counts.refused.items()):
        put("dledger_refused_requests_total", n, code)
    put("dledger_connections", state["connections"])
    for reason, n in sorted(state["closed_for"].items()):
        put("dledger_connections_closed_total", n, reason)
    put("dledger_recovery_dropped_entries", counts.recovery_dropped[0])
    put("dledger_recovery_dropped_committed_entries", counts.recovery_dropped[1])
    scrub = state.get("scrub")
    if scrub is not None:  # (a member with --scrub-rate 0 has none)
        put("dledger_scrub_bytes_total", scrub["bytes"])
        put("dledger_scrub_passes_total", scrub["passes"])
        put("dledger_scrub_last_pass_timestamp_seconds", scrub["last_pass"] or 0)  # (0: no pass finished yet)
        for name, by_kind in (("found", scrub["found"]), ("repaired", scrub["repaired"]),
                              ("unrepaired", scrub["unrepaired"])):
            for kind, n in by_kind.items():
                put(f"dledger_scrub_damage_{name}_total", n, kind)
        put("dledger_scrub_damaged_entries", len(scrub["damaged"]))
    return list(made.values())


class _Collector:
    """prometheus_client's view of a node: each scrape (in the server's thread) asks the
    node's loop for its state and turns it into families there."""

    def __init__(self, loop, read_state, counts: Counts, labels: dict[str, str]) -> None:
        self.loop, self.read_state, self.counts, self.labels = loop, read_state, counts, labels

    def collect(self):
        fut: concurrent.futures.Future = concurrent.futures.Future()

        def fill() -> None:
            try:
                fut.set_result(families(self.read_state(), self.counts, self.labels))
            except BaseException as exc:  # noqa: BLE001 - handed to the scrape thread, which says it
                fut.set_exception(exc)
        try:
            self.loop.call_soon_threadsafe(fill)
        except RuntimeError as exc:  # (the loop is closed: the node is stopping)
            log.debug("metrics scrape: %s", exc)
            return iter(())
        try:
            return iter(fut.result(SCRAPE_WAIT_S))
        except concurrent.futures.TimeoutError:
            log.warning("metrics scrape: the node's loop did not answer within %.0f s", SCRAPE_WAIT_S)
        except Exception as exc:  # noqa: BLE001 - a bug of ours: the scrape still gets the process metrics
            log.warning("metrics scrape failed: %s", exc, exc_info=exc)
        return iter(())


CONNECTION_TIMEOUT_S = 10.0  # a scraper's connection: TLS handshake, request and answer


def _server_class(family: int, context, refuse=None):
    """A threading WSGI server whose connections each have ``CONNECTION_TIMEOUT_S`` and, with
    an SSL ``context``, do their TLS handshake in their own thread: a client that connects
    and sends nothing holds one thread for a while, never the accepting one (which
    prometheus_client's own TLS server does: it wraps the listening socket)."""
    from prometheus_client.exposition import ThreadingWSGIServer

    class Server(ThreadingWSGIServer):
        address_family = family

        def finish_request(self, request, client_address) -> None:  # (in the connection's thread)
            request.settimeout(CONNECTION_TIMEOUT_S)
            if context is None:
                super().finish_request(request, client_address)
                return
            try:
                conn = context.wrap_socket(request, server_side=True)
            except OSError as exc:  # (ssl.SSLError too: no certificate, one the CA did not sign, not TLS)
                log.debug("metrics: TLS handshake with %s failed: %s", client_address, exc)
                return
            why = refuse(conn.getpeercert()) if refuse is not None else None
            if why is not None:  # (a revoked certificate: cluster/net/crl.py)
                log.warning("metrics: refused a scrape from %s: %s", client_address, why)
                conn.close()
                return
            try:
                super().finish_request(conn, client_address)
            finally:
                conn.close()

    return Server


class MetricsServer:
    """The HTTP endpoint (``/metrics``; prometheus_client's WSGI app in a server thread),
    with the process metrics (CPU, memory, open files) beside the node's. With ``tls`` (the
    node's TlsFiles) it serves HTTPS with the node's certificate and takes only scrapers
    showing a certificate the CA signed (TLS 1.2 or later), and not one ``refuse(peercert)``
    refuses (revoked: the node's CRL, reloaded on SIGHUP); the certificate files are read
    once, at start (SIGHUP reloads the node's connections, not this)."""

    def __init__(self, host: str, port: int, loop, read_state, counts: Counts, labels: dict[str, str],
                 tls=None, refuse=None) -> None:
        import socket
        import ssl
        import threading
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import CollectorRegistry, ProcessCollector, make_wsgi_app

        class Quiet(WSGIRequestHandler):
            def log_message(self, *args) -> None:  # (no line per scrape on stderr)
                pass

        self.registry = CollectorRegistry(auto_describe=False)
        ProcessCollector(registry=self.registry)
        self.registry.register(_Collector(loop, read_state, counts, labels))
        context = None
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_2
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(tls.ca)
            context.load_cert_chain(tls.cert, tls.key)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.httpd = make_server(host, port, make_wsgi_app(self.registry), _server_class(family, context, refuse),
                                 handler_class=Quiet)
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1},
                                       name="metrics", daemon=True)
        self.thread.start()
        shown = f"[{host}]" if ":" in host else host
        self.url = f"{'https' if tls else 'http'}://{shown}:{self.httpd.server_port}/metrics"

    def close(self) -> None:
        """Stop accepting (within the server's 0.1 s poll); connections under way end by themselves."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
