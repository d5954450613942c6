"""RocketMQ's own message store in DLedger mode (Java), built from sources at test and benchmark time.

Nothing of RocketMQ, DLedger or fastjson lives in this repository: their sources are taken
from local git mirrors, compiled with javac, and the classes are cached. What is built, for
``version="4.9.4"``:

- fastjson 1.2.69 (alibaba/fastjson, the version RocketMQ 4.9.4's pom names), the core
  package: its integrations with frameworks that are not here (hsf, jaxrs, retrofit, spring)
  are left out, and the two classes of it that name absent libraries only to be reached by
  class name (``support.springfox.SwaggerJsonSerializer``, ``support.moneta.MonetaCodec``)
  are replaced by stand-ins of the same name without those imports;
- RocketMQ 4.9.4's ``remoting``, ``logging``, ``common`` and ``store`` modules
  (apache/rocketmq, main sources) together with DLedger 0.2.6 (openmessaging/dledger, tag
  ``dledger-0.2.6``, without its ``cmdline`` package) in ONE javac run: DLedger imports
  RocketMQ's remoting and the store imports DLedger. Against Debian's netty 4.1.48, which is
  older than the 4.1.65 RocketMQ names, one adaptation: RocketMQ's ``NettyLogger`` bridge
  gets netty's Throwable-only logger methods, delegating to its own;
- our own Java programs, tests/support/java/rocketmq/*.java: ``RocketMQStoreWriter`` (opens
  ``DefaultMessageStore`` with ``enableDLegerCommitLog``, puts messages, prints what
  RocketMQ reported and stored), ``RocketMQDecodeAll`` (RocketMQ's
  ``MessageDecoder.decode`` over every entry of a DLedger node directory, timed) and
  ``RocketMQBrokerMember`` (one member of a broker group of several, putting messages
  whenever it leads: :class:`BrokerMember`).

``version="4.9.8"`` builds the same way from ``rocketmq-all-4.9.8`` with DLedger 0.3.1.2
(``dledger-all-0.3.1.2``, its ``dledger`` module: the version 4.9.8's pom names) and the
same fastjson 1.2.69.

Needs ``javac``/``java``, the three mirrors (``ROCKETMQ_MIRROR``, ``DLEDGER_MIRROR``,
``FASTJSON_MIRROR``; defaults ``<project parent>/.mirror/<owner>+<name>/repo``) and Debian's
jars in /usr/share/java (``DEBIAN_JAVA_DIR``): packages libnetty-java, libslf4j-java,
libcommons-lang3-java, libcommons-validator-java, libzstd-jni-java, liblz4-java,
libjna-java, libjcommander-java (DLedger's config class is annotated for it), and for
compiling fastjson libguava-java and libjoda-time-java (scripts/test-deps.sh installs them).
slf4j-nop (libslf4j-java) goes on the run class path only, which keeps RocketMQ and DLedger
quiet. A missing piece raises :class:`Unavailable` naming it; tests skip with that reason.
The cache is ``~/.cache/dledgerctl-java`` (``DLEDGERCTL_JAVA_CACHE``): the dependencies under
``rocketmq-<version>-<key>``, keyed by the version, the three commits, the jars, the javac
version and our adaptations; our own programs in a subdirectory of it keyed by their
sources, so editing them recompiles only them. A cold build takes about 15 s, a cached one
a quarter of a second.

What RocketMQ's store does with what it is given (seen with both versions, which agree):

- ``phy_offset`` (wroteOffset) is the DLedger entry's ``pos`` + 48 (the entry header), and
  ``size`` the entry's bodySize; the message id is the store host's address and port and
  that offset (16 bytes + 4 + 8 for a v6 store host);
- the store itself sets sys_flag bit 0x10 for a v6 born host and 0x20 for a v6 store host;
  other bits are kept as given (0x1 marks a compressed body; the store compresses nothing);
- properties hold what the producer side put (TAGS, KEYS, WAIT, UNIQ_KEY, the caller's);
  the store adds nothing, except for a delay level: the message is stored under
  SCHEDULE_TOPIC_XXXX, queue level - 1, with DELAY, REAL_TOPIC and REAL_QID;
- body_crc is zlib's crc32 of the body masked with 0x7fffffff;
- a batch is one DLedger entry per message; every member gets the batch's sys_flag, hosts,
  born/store timestamps and reconsume times, keeps its own flag, body and properties, and
  queue offsets run on from the first; the batch's own properties are not stored;
- a lone member elects itself at term 0 and stays there across restarts; reopening a store
  root continues its queue offsets;
- the root holds ``dledger-<id>/{data,index,checkpoint,currterm}``, ``consumequeue/<topic>/
  <queue>/``, ``index/``, ``checkpoint`` and ``lock``; no ``config/``: that is written by the
  broker and by the schedule service, which only a broker's role change starts.

Used by the tests and benchmarks that compare dledgerctl's reading of a RocketMQ commit log
with RocketMQ's: :func:`build`, then :func:`write_store` and :func:`decode_all`; and by the
broker group with a dledgerctl member (tests/java/test_rocketmq_group.py): :class:`BrokerMember`.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from tests.support.javabuild import (
    JAVA_FLAGS,
    NETTY,
    NETTY_LOGGER_EXTRA,
    Unavailable,  # noqa: F401 (tests catch javarocketmq.Unavailable)
    FASTJSON_STANDINS,
    add_netty_logger_methods,
    build_fastjson,
    cache_key,
    cached,
    commits,
    extract,
    jars,
    javac,
    optional_jar,
    require_jdk,
)
from tests.support.paths import ROOT
from tests.support.ports import free_port_base

HERE = os.path.dirname(os.path.abspath(__file__))
PROJECT = ROOT
OUR_SOURCES = os.path.join(HERE, "java", "rocketmq")

# version -> (RocketMQ tag, DLedger tag, DLedger's source root in that tag, fastjson tag)
VERSIONS = {
    "4.9.4": ("rocketmq-all-4.9.4", "dledger-0.2.6", "src/main/java", "1.2.69"),
    "4.9.8": ("rocketmq-all-4.9.8", "dledger-all-0.3.1.2", "dledger/src/main/java", "1.2.69"),
}
ROCKETMQ_MODULES = ["remoting", "logging", "common", "store"]
DLEDGER_LEFT_OUT = "io/openmessaging/storage/dledger/cmdline"

DEBIAN_PACKAGES = ["libnetty-java", "libslf4j-java", "libcommons-lang3-java", "libcommons-validator-java",
                   "libzstd-jni-java", "liblz4-java", "libjna-java", "libjcommander-java", "libguava-java",
                   "libjoda-time-java"]
# jar (in DEBIAN_JAVA_DIR) -> Debian package
COMPILE_JARS = {**{j: "libnetty-java" for j in NETTY}, "slf4j-api": "libslf4j-java",
                "commons-lang3": "libcommons-lang3-java", "commons-validator": "libcommons-validator-java",
                "zstd-jni": "libzstd-jni-java", "lz4-java": "liblz4-java", "jna": "libjna-java",
                "jcommander": "libjcommander-java"}  # DLedgerConfig's options are jcommander-annotated
QUIET_JAR = ("slf4j-nop", "libslf4j-java")  # run time only, when there
FASTJSON_JARS = {"guava": "libguava-java", "joda-time": "libjoda-time-java"}

WRITER = "RocketMQStoreWriter"
DECODER = "RocketMQDecodeAll"


def _build_deps_into(out: str, version: str, resolved: dict[str, tuple[str, str]], compile_jars: list[str],
                     fastjson_jars: list[str]) -> None:
    rocketmq_tag, dledger_tag, dledger_root, fastjson_tag = VERSIONS[version]
    with tempfile.TemporaryDirectory(prefix="rocketmq-java-build-") as work:
        build_fastjson(resolved["fastjson"], os.path.join(out, "fastjson"), fastjson_jars, work, fastjson_tag)
        # RocketMQ's four modules and DLedger, in one run
        repo, commit = resolved["rocketmq"]
        src = os.path.join(work, "rocketmq")
        extract(repo, commit, [f"{m}/src/main/java" for m in ROCKETMQ_MODULES], src)
        roots = [os.path.join(src, m, "src/main/java") for m in ROCKETMQ_MODULES]
        add_netty_logger_methods(
            os.path.join(src, "remoting/src/main/java/org/apache/rocketmq/remoting/netty/NettyLogger.java"),
            f"RocketMQ {version}")
        repo, commit = resolved["dledger"]
        dsrc = os.path.join(work, "dledger")
        extract(repo, commit, [dledger_root], dsrc)
        shutil.rmtree(os.path.join(dsrc, dledger_root, DLEDGER_LEFT_OUT), ignore_errors=True)
        roots.append(os.path.join(dsrc, dledger_root))
        javac(roots, os.path.join(out, "rocketmq"), compile_jars + [os.path.join(out, "fastjson")],
              ["--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"],
              what=f"{rocketmq_tag} ({', '.join(ROCKETMQ_MODULES)}) + {dledger_tag}")


def _our_sources() -> list[str]:
    if not os.path.isdir(OUR_SOURCES):
        raise Unavailable(f"our Java sources are missing: {OUR_SOURCES}")
    return sorted(os.path.join(OUR_SOURCES, f) for f in os.listdir(OUR_SOURCES) if f.endswith(".java"))


class JavaRocketMQ:
    """A built RocketMQ store (one version) with our programs: their class path and java command."""

    def __init__(self, version: str, root: str, ours: str, jars: list[str]) -> None:
        self.version = version
        self.root = root
        self.classpath = os.pathsep.join([ours, os.path.join(root, "rocketmq"), os.path.join(root, "fastjson"), *jars])
        self.java_flags = list(JAVA_FLAGS)

    def command(self, main: str, *args: str, java_args: list[str] = ()) -> list[str]:
        # (a master store's HAService listens: on a port below the ephemeral range, this test
        # process's own share of them (ports.py), not one that the Java side found free and that a
        # connection's source port may take before the store binds it)
        ha_port = f"-Ddledgerctl.haPort={free_port_base(1)}"
        return ["java", *self.java_flags, ha_port, *java_args, "-cp", self.classpath, main, *args]

    def __repr__(self) -> str:
        return f"JavaRocketMQ({self.version!r}, {self.root!r})"


def build(version: str = "4.9.4", cache_root: str | None = None) -> JavaRocketMQ:
    """Build (or take from the cache) RocketMQ ``version``'s store with DLedger and fastjson,
    and our programs; Unavailable if a piece is missing."""
    if version not in VERSIONS:
        raise Unavailable(f"RocketMQ {version} is not one this harness builds (it builds {', '.join(VERSIONS)})")
    rocketmq_tag, dledger_tag, _, fastjson_tag = VERSIONS[version]
    require_jdk()
    resolved = commits({"rocketmq": rocketmq_tag, "dledger": dledger_tag, "fastjson": fastjson_tag})
    compile_jars = jars(COMPILE_JARS)
    fastjson_jars = jars(FASTJSON_JARS)
    quiet = optional_jar(*QUIET_JAR)  # (without: slf4j says once that it has no binding, on stderr)
    sources = _our_sources()
    # the dependencies, keyed without our programs; ours in a directory of their own inside, keyed
    # by their sources, so editing them recompiles only them
    key = cache_key([version, *(c for _, c in resolved.values()),
                     *(os.path.realpath(j) for j in compile_jars + fastjson_jars), NETTY_LOGGER_EXTRA,
                     *FASTJSON_STANDINS.values()])
    out = cached(f"rocketmq-{version}", key,
                 lambda tmp: _build_deps_into(tmp, version, resolved, compile_jars, fastjson_jars), cache_root)
    ours = cached("ours", cache_key([], sources, relative_to=OUR_SOURCES),
                  lambda tmp: javac([OUR_SOURCES], tmp, [os.path.join(out, "rocketmq"), os.path.join(out, "fastjson"),
                                                         *compile_jars], what="tests/support/java/rocketmq"), out)
    return JavaRocketMQ(version, out, ours, compile_jars + quiet)


# ---------------------------------------------------------------------------------------------
# running our programs

def _free_port() -> int:
    try:
        from tests.support.ports import free_ports  # tests/support/ports.py: below the ephemeral range
        return free_ports(1)[0]
    except ImportError:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def _host(text: str, what: str) -> str:
    """``1.2.3.4:10911`` or ``[::1]:10911``, checked; returned as given."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d+)|([0-9.]+):(\d+)", text)
    if not m:
        raise ValueError(f"{what} {text!r}: want 'a.b.c.d:port' or '[v6]:port'")
    addr, port = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    ip = ipaddress.ip_address(addr)
    if not 0 <= int(port) <= 65535 or (m.group(1) and ip.version != 6):
        raise ValueError(f"{what} {text!r}: bad address or port")
    return text


def _host_out(text: str | None) -> str | None:
    """Java's ``ip:port`` (v6 addresses in full, bracketed by our writer) in compressed form."""
    if not text:
        return text
    m = re.fullmatch(r"\[(.*)\]:(\d+)", text)
    if m:
        return f"[{ipaddress.ip_address(m.group(1)).compressed}]:{m.group(2)}"
    return text


# what a batch's members must agree on (RocketMQ stores the batch's): key in the message -> key in the spec
_SHARED_IN_BATCH = {"topic": "topic", "queue_id": "queueId", "sys_flag": "sysFlag", "born_host": "bornHost",
                    "store_host": "storeHost", "reconsume_times": "reconsumeTimes", "born_timestamp": "bornTimestamp",
                    "wait_store_msg_ok": "waitStoreMsgOK"}


def _message_spec(i: int, m: dict) -> dict:
    known = {"topic", "queue_id", "body", "tags", "keys", "properties", "flag", "born_host", "store_host", "sys_flag",
             "reconsume_times", "delay_level", "batch", "born_timestamp", "uniq_key", "wait_store_msg_ok"}
    unknown = set(m) - known
    if unknown:
        raise ValueError(f"message {i}: unknown keys {sorted(unknown)}")
    body = m.get("body", b"")
    if isinstance(body, str):
        body = body.encode()
    props = m.get("properties") or {}
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in props.items()):
        raise ValueError(f"message {i}: properties must map str to str")
    return {
        "index": i,
        "topic": m["topic"],
        "queueId": int(m.get("queue_id", 0)),
        "body": base64.b64encode(bytes(body)).decode(),
        "tags": m.get("tags"),
        "keys": m.get("keys"),
        "properties": props,
        "flag": int(m.get("flag", 0)),
        "bornHost": _host(m.get("born_host", "127.0.0.1:50000"), "born_host"),
        "storeHost": _host(m.get("store_host", "127.0.0.1:10911"), "store_host"),
        "sysFlag": int(m.get("sys_flag", 0)),
        "reconsumeTimes": int(m.get("reconsume_times", 0)),
        "delayLevel": int(m.get("delay_level", 0)),
        "bornTimestamp": int(m.get("born_timestamp", -1)),
        "uniqKey": bool(m.get("uniq_key", True)),
        "waitStoreMsgOK": bool(m.get("wait_store_msg_ok", True)),
    }


def _run_json(proc_cmd: list[str], timeout: float, what: str) -> list[dict]:
    try:
        proc = subprocess.run(proc_cmd, capture_output=True, encoding="utf-8", errors="replace",
                              timeout=timeout)  # kills java on timeout
    except subprocess.TimeoutExpired as exc:
        err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        raise AssertionError(f"{what} did not finish in {timeout}s (killed):\n{err[-4000:]}") from None
    if proc.returncode != 0:
        raise AssertionError(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-6000:]}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def write_store(rocketmq: JavaRocketMQ, root: str, messages: list[dict], *, group: str = "broker-a",
                self_id: str = "n0", peers: str | None = None, data_file_size: int = 1 << 20,
                consume_queue_file_size: int = 20 * 1000, timeout: float = 180.0,
                java_args: list[str] = (), dledger: bool = True, done: dict | None = None) -> list[dict]:
    """Put ``messages`` through RocketMQ's ``DefaultMessageStore`` in DLedger mode, its files under
    ``root`` (``root/dledger-<self_id>/{data,index}``, ``consumequeue/``, ``index/``,
    ``checkpoint``; a root that holds a store already is reopened and appended to); one dict
    per message, in the order of ``messages``. ``peers`` (DLedger's ``id-host:port;...``)
    defaults to ``self_id`` alone on a free loopback port: the member must be able to lead by
    itself, nothing else is started. ``data_file_size`` is DLedger's data file size (RocketMQ's
    mappedFileSizeCommitLog; an entry must fit), ``consume_queue_file_size`` the consume
    queues'. ``timeout`` bounds the whole run (the Java side gives up 10 s earlier).

    A message: ``topic``, ``queue_id``, ``body`` (bytes) and optionally ``tags``, ``keys`` (str,
    several separated by spaces), ``properties`` (extra properties, str -> str, put as they
    are), ``flag``, ``born_host`` / ``store_host`` (``"1.2.3.4:10911"`` or ``"[::1]:10911"``;
    defaults 127.0.0.1:50000 and 127.0.0.1:10911), ``sys_flag`` (extra bits, e.g. 0x1 for a
    body already zlib-compressed), ``reconsume_times``, ``delay_level``, ``born_timestamp``
    (ms; default now), ``uniq_key`` (default True: a UNIQ_KEY made by RocketMQ's
    ``MessageClientIDSetter``, as a producer sets it, unless the properties hold one),
    ``wait_store_msg_ok`` (default True: the WAIT property) and ``batch`` (any hashable:
    messages with the same value go through ``putMessages`` as one ``MessageExtBatch`` built
    by ``MessageBatch.generateFromList``, as a producer's batch; put where the first of them
    stands). Members of a batch must share topic, queue_id, sys_flag, hosts,
    reconsume_times, born_timestamp and wait_store_msg_ok (RocketMQ stores the batch's for
    all). RocketMQ's MessageBatch refuses a batch of a %RETRY% topic or with a delay level:
    its members come back with status ``REFUSED_BY_MESSAGE_BATCH`` and ``error``.

    ``dledger=False``: the store in master-slave mode (``enableDLegerCommitLog=false``; its
    commit log in ``root/commitlog``, files of ``data_file_size``). Such a root written again
    with ``dledger=True`` is what a broker that enters DLedger mode with data leaves (an old
    commit log, then the DLedger log from the divided offset: store/rocketmq/divided.py).
    ``done`` (a dict) gets what the store said after the puts: ``min_phy_offset``,
    ``max_phy_offset`` and ``divided`` (``DLedgerCommitLog.getDividedCommitlogOffset``; -1
    without an old log or in master-slave mode).

    Each dict: ``index`` (into ``messages``), ``status`` (the PutMessageStatus name),
    ``batch`` (bool), what RocketMQ reported (``msg_id``, ``queue_offset``, ``phy_offset`` =
    wroteOffset; ``size`` = wroteBytes, for a batch member its stored size, the result
    having only the batch's ``batch_wrote_offset`` / ``batch_wrote_bytes`` /
    ``batch_msg_num``) and what it stored, read back with ``lookMessageByOffset``: ``topic``,
    ``queue_id`` (a delayed message's are the schedule topic's), ``flag``, ``sys_flag``,
    ``tags``, ``keys``, ``properties``, ``body`` (bytes; b"" for an empty one, which
    RocketMQ's decoder gives as null), ``body_crc``, ``reconsume_times``, ``born_timestamp``,
    ``store_timestamp``, ``born_host``, ``store_host`` (``ip:port``, v6 as ``[addr]:port``
    compressed), ``prepared_transaction_offset``, and ``cq_phy_offset``: the commit log
    offset the consume queue holds for (topic, queue_id, queue_offset).
    ``stored_queue_offset`` / ``stored_phy_offset`` / ``stored_size`` appear only if the
    stored message disagrees with the report.
    """
    if not re.fullmatch(r"n\d+", self_id):
        raise ValueError(f"self_id {self_id!r}: RocketMQ parses the digits after one letter (n0, n1, ...)")
    peers = peers or f"{self_id}-127.0.0.1:{_free_port()}"
    specs = [_message_spec(i, m) for i, m in enumerate(messages)]
    puts: list[dict] = []
    batches: dict = {}
    for i, m in enumerate(messages):
        if m.get("batch") is None:
            puts.append({"batch": False, "messages": [specs[i]]})
        elif m["batch"] in batches:
            first = batches[m["batch"]]["messages"][0]
            for key, skey in _SHARED_IN_BATCH.items():
                if specs[i][skey] != first[skey]:
                    raise ValueError(f"message {i}: {key} differs from the rest of batch {m['batch']!r}")
            batches[m["batch"]]["messages"].append(specs[i])
        else:
            batches[m["batch"]] = {"batch": True, "messages": [specs[i]]}
            puts.append(batches[m["batch"]])
    spec = {"root": os.path.abspath(root), "group": group, "selfId": self_id, "peers": peers,
            "dataFileSize": int(data_file_size), "consumeQueueFileSize": int(consume_queue_file_size),
            "deadlineMillis": int(max(timeout - 10, 5) * 1000), "puts": puts, "dledger": bool(dledger)}
    os.makedirs(root, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="rocketmq-spec-", delete=False) as fh:
        json.dump(spec, fh)
    try:
        lines = _run_json(rocketmq.command(WRITER, fh.name, java_args=java_args), timeout,
                          f"{WRITER} (RocketMQ {rocketmq.version})")
    finally:
        os.unlink(fh.name)
    out: list[dict | None] = [None] * len(messages)
    for rec in lines:
        if rec.get("kind") == "done":
            if done is not None:
                done.update(rec)
            continue
        if rec.get("body") is not None:
            rec["body"] = base64.b64decode(rec["body"])
        elif rec.get("status") == "PUT_OK":
            rec["body"] = b""  # RocketMQ's decoder leaves an empty body null
        for key in ("born_host", "store_host"):
            rec[key] = _host_out(rec.get(key))
        out[rec["index"]] = rec
    missing = [i for i, r in enumerate(out) if r is None]
    if missing:
        raise AssertionError(f"{WRITER} printed nothing for messages {missing[:10]}")
    return out


def decode_all(rocketmq: JavaRocketMQ, node_dir: str, *, warmup: int = 1, repeat: int = 1, timeout: float = 600.0,
               java_args: list[str] = ()) -> dict:
    """RocketMQ's ``MessageDecoder.decode(buf, readBody=true, deCompressBody=false)`` over every entry
    of the DLedger node directory ``node_dir`` (``<node_dir>/data/<start offset>`` files).

    The files are mapped and paged in first; then ``warmup`` untimed passes and ``repeat``
    timed ones (System.nanoTime around the loop alone: walking the entry headers and decoding
    each body). Returns ``messages`` (entries decoded), ``failed`` (bodies the decoder gave up
    on: null), ``bytes`` (entry bytes walked, headers included), ``body_bytes``, ``files``,
    ``seconds`` (the fastest timed pass), ``passes`` (every timed pass's seconds) and
    ``checksum`` (sum of queue offsets, physical offsets and body lengths, so the work is used).
    """
    lines = _run_json(rocketmq.command(DECODER, os.path.abspath(node_dir), str(int(warmup)), str(int(repeat)),
                                       java_args=java_args), timeout, f"{DECODER} (RocketMQ {rocketmq.version})")
    if len(lines) != 1:
        raise AssertionError(f"{DECODER} printed {len(lines)} JSON lines, expected one")
    return lines[0]


MEMBER = "RocketMQBrokerMember"


class BrokerMember:
    """One member of a broker group: RocketMQ's message store in DLedger mode in a JVM of its
    own (tests/support/java/rocketmq/RocketMQBrokerMember.java), putting a message every
    ``put_interval_ms`` whenever its member leads. Its events (JSON lines) are collected by
    a thread: ``events`` (all, in order), ``puts()`` (the acknowledged ones). ``start()``
    (again after ``kill()`` or ``quit()``: the same store root), ``kill()`` (SIGKILL),
    ``quit()`` (graceful), ``pause()`` / ``resume()`` the puts."""

    def __init__(self, rocketmq: JavaRocketMQ, root: str, self_id: str, peers: str, *, group: str = "broker-a",
                 topic: str = "T", queues: int = 4, put_interval_ms: int = 20, body_bytes: int = 100,
                 data_file_size: int = 1 << 20, consume_queue_file_size: int = 20 * 1000, log_path: str | None = None):
        if not re.fullmatch(r"n\d+", self_id):
            raise ValueError(f"self_id {self_id!r}: RocketMQ parses the digits after one letter (n0, n1, ...)")
        self.rocketmq, self.root, self.self_id = rocketmq, os.path.abspath(root), self_id
        self.spec = {"root": self.root, "group": group, "selfId": self_id, "peers": peers,
                     "dataFileSize": int(data_file_size), "consumeQueueFileSize": int(consume_queue_file_size),
                     "topic": topic, "queues": int(queues), "putIntervalMs": int(put_interval_ms),
                     "bodyBytes": int(body_bytes)}
        self.log_path = log_path or os.path.join(os.path.dirname(self.root), f"{self_id}-java.log")
        self.events: list[dict] = []
        self.proc: subprocess.Popen | None = None
        self._cond = threading.Condition()
        self._spec_path: str | None = None

    def start(self) -> "BrokerMember":
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self.self_id} is running")
        os.makedirs(self.root, exist_ok=True)
        self._spec_path = os.path.join(os.path.dirname(self.root), f"{self.self_id}-spec.json")
        with open(self._spec_path, "w") as fh:
            json.dump(self.spec, fh)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.rocketmq.command(MEMBER, self._spec_path), stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=log)
        log.close()
        proc = self.proc

        def read() -> None:
            for line in proc.stdout:
                if line.startswith(b"{"):
                    rec = json.loads(line)
                    rec["run"] = proc.pid
                    with self._cond:
                        self.events.append(rec)
                        self._cond.notify_all()
            with self._cond:
                self._cond.notify_all()

        threading.Thread(target=read, daemon=True, name=f"{self.self_id}-events").start()
        self.wait_for(lambda e: e["event"] == "started" and e["run"] == proc.pid, 60, "the store to start")
        return self

    def wait_for(self, match, timeout: float, what: str) -> dict:
        """The first event (of all so far, then as they come) ``match`` takes; AssertionError after ``timeout``."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for e in self.events[seen:]:
                    if match(e):
                        return e
                seen = len(self.events)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{self.self_id}: no {what} within {timeout} s (its log: {self.log_path})")
                if self.proc is not None and self.proc.poll() is not None and seen == len(self.events):
                    self._cond.wait(min(left, 0.2))
                    if len(self.events) == seen:
                        raise AssertionError(f"{self.self_id} exited ({self.proc.returncode}) before {what} "
                                             f"(its log: {self.log_path})")
                else:
                    self._cond.wait(min(left, 0.5))

    def _say(self, command: str) -> None:
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError(f"{self.self_id} is not running")
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()

    def pause(self) -> None:
        self._say("pause")

    def resume(self) -> None:
        self._say("resume")

    def state(self, timeout: float = 10) -> dict:
        n = len(self.events)
        self._say("state")
        return self.wait_for(lambda e: e["event"] == "state" and self.events.index(e) >= n, timeout, "state")

    def quit(self, timeout: float = 60) -> None:
        """Stop putting, let the consume queues catch up, shut the store down."""
        self._say("quit")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.self_id} did not quit within {timeout} s (its log: {self.log_path})") \
                from None
        if self.proc.returncode != 0:
            raise AssertionError(f"{self.self_id} quit with status {self.proc.returncode} (its log: {self.log_path})")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def puts(self) -> list[dict]:
        """The puts RocketMQ acknowledged (PUT_OK), in order."""
        with self._cond:
            return [e for e in self.events if e["event"] == "put" and e["status"] == "PUT_OK"]

    def role(self) -> dict | None:
        with self._cond:
            roles = [e for e in self.events if e["event"] == "role" and self.proc is not None
                     and e["run"] == self.proc.pid]
        return roles[-1] if roles else None
