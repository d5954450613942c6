"""Stores checked against the real DLedger file store (Java), not a re-implementation.

At test time the DLedger sources of a tag are taken from a local git mirror of
openmessaging/dledger, compiled with javac together with our harness
(tests/support/java/DLedgerReadCheck.java), and run: the harness opens a node directory with
``DLedgerMmapFileStore`` (``load()`` then ``recover()``, as DLedgerServer startup does) and
prints what DLedger recovered in the fixtures' manifest format, or appends entries through
``appendAsLeader`` and prints what it wrote. No DLedger code lives in this repository.

Versions: ``dledger-0.2.7`` (the format the project must stay compatible with), the newest
``dledger-all-*`` tag and ``master`` of the mirror (DLedger 0.3+ layout, module ``dledger/``).

Needs: ``javac``/``java`` and the mirror (default ``<project parent>/.mirror/openmessaging+dledger/repo``,
override with ``DLEDGER_MIRROR``); jars from the local Maven repository (``~/.m2/repository``
or ``M2_REPO``), else Debian's in /usr/share/java (scripts/test-deps.sh): slf4j-api (+ slf4j-simple or slf4j-nop when present) and, for DLedger 0.3+,
commons-lang3. JCommander's ``@Parameter`` (0.2.7's DLedgerConfig) and netty's
``StringUtil.isNullOrEmpty`` (MultiPathMmapFileList) are replaced by the tiny stand-ins in
tests/support/java/stubs/ when their jars are not there. Missing pieces skip the tests with the
reason. Compiled classes are cached in ``~/.cache/dledgerctl-java`` (``DLEDGERCTL_JAVA_CACHE``),
keyed by the DLedger commit and the harness sources.

What "DLedger 0.3+ reads the committed index" means: it does not; since 0.3 DLedger keeps the
committed index only in memory (no ``checkpoint`` file), so its reading reports -1 there.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
import tarfile
import time
import io

import pytest
from typer.testing import CliRunner

from tests.support.paths import ROOT, SUPPORT
from tests.support.stores import FIXTURE_STORES, FIXTURES, file_digests, patch, sample_bodies, write_project_store

PROJECT = ROOT
JAVA_DIR = os.path.join(SUPPORT, "java")
HARNESS = os.path.join(JAVA_DIR, "DLedgerReadCheck.java")
STUBS_DIR = os.path.join(JAVA_DIR, "stubs")
MIRROR = os.environ.get("DLEDGER_MIRROR") or os.path.join(
    os.path.dirname(PROJECT), ".mirror", "openmessaging+dledger", "repo")
M2 = os.environ.get("M2_REPO") or os.path.expanduser("~/.m2/repository")
STORE_CLASS = "io/openmessaging/storage/dledger/store/file/DLedgerMmapFileStore.java"
JAVAC_FLAGS = ["--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED"]  # DLedger 0.3+ DefaultMmapFile
# DLedger targets Java 8: on 9+ its mmap cleaner (file removal on truncate) needs these
JAVA_FLAGS = JAVAC_FLAGS + ["--add-opens", "java.base/java.nio=ALL-UNNAMED",
                            "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
                            "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED"]

# stand-in source (ours) -> glob of the jar that makes it unnecessary
STUBS = {
    "com/beust/jcommander/Parameter.java": "com/beust/jcommander/*/jcommander-*.jar",
    "io/netty/util/internal/StringUtil.java": "io/netty/netty-common/*/netty-common-*.jar",
}
VERSIONS = ["dledger-0.2.7", "latest-tag", "master"]
CURRENT = ["latest-tag", "master"]


# --- finding the tools, the mirror and the jars ------------------------------------------

def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", MIRROR, *args], check=True, capture_output=True, text=True).stdout


def _version_key(path: str) -> tuple:
    v = os.path.basename(os.path.dirname(path))
    return tuple(int(x) if x.isdigit() else -1 for x in re.split(r"[.-]", v))


def _jars(pattern: str) -> list[str]:
    """Jars under the local Maven repository, newest version first; else Debian's of the same
    name (/usr/share/java, ``DEBIAN_JAVA_DIR``: what scripts/test-deps.sh installs)."""
    found = sorted(glob.glob(os.path.join(M2, pattern)), key=_version_key, reverse=True)
    if not found:
        debian = os.environ.get("DEBIAN_JAVA_DIR", "/usr/share/java")
        found = sorted(glob.glob(os.path.join(debian, os.path.basename(pattern))), reverse=True)
    return found


def _slf4j() -> tuple[str, list[str]]:
    """(slf4j-api jar, runtime binding jars of the same version): 1.7.x preferred, as DLedger uses."""
    apis = _jars("org/slf4j/slf4j-api/*/slf4j-api-*.jar")
    apis = [a for a in apis if not a.endswith(("-sources.jar", "-javadoc.jar"))]
    if not apis:
        pytest.skip(f"no slf4j-api jar under {M2}")
    apis.sort(key=lambda a: (os.path.basename(os.path.dirname(a)).startswith("1.7"), _version_key(a)), reverse=True)
    for api in apis:
        ver = os.path.basename(api)[len("slf4j-api-"):-len(".jar")]
        for binding in ("slf4j-simple", "slf4j-nop"):
            for jar in (os.path.join(M2, "org/slf4j", binding, ver, f"{binding}-{ver}.jar"),
                        os.path.join(os.path.dirname(api), f"{binding}-{ver}.jar")):  # (Debian's, side by side)
                if os.path.isfile(jar):
                    return api, [jar]
    return apis[0], []  # no binding: slf4j falls back to no-op logging


class DLedger:
    """One compiled DLedger version and the way to run the harness against it."""

    def __init__(self, label: str, ref: str, commit: str, out: str, runtime_cp: list[str],
                 reads_checkpoint: bool, compiled: list[str], stubs_used: list[str]):
        self.label, self.ref, self.commit, self.out = label, ref, commit, out
        self.classpath = os.pathsep.join([out] + runtime_cp)
        self.reads_checkpoint = reads_checkpoint
        self.compiled, self.stubs_used = compiled, stubs_used

    def run(self, mode: str, node_dir, data_file_size: int, index_file_size: int, *extra: str,
            expect_rc: int | None = 0) -> subprocess.CompletedProcess:
        node_dir = os.path.abspath(str(node_dir))
        base, name = os.path.split(node_dir)
        assert name.startswith("dledger-"), f"DLedger node directories are named dledger-<selfId>: {node_dir}"
        cmd = ["java", *JAVA_FLAGS, "-Dorg.slf4j.simpleLogger.defaultLogLevel=info", "-cp", self.classpath,
               "DLedgerReadCheck", mode, base, name[len("dledger-"):], str(data_file_size), str(index_file_size),
               *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if expect_rc is not None and proc.returncode != expect_rc:
            raise AssertionError(f"DLedger {self.ref} {mode} exited {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}"
                                 f"\n--- stderr (tail)\n{proc.stderr[-6000:]}")
        return proc

    def read(self, node_dir, data_file_size: int, index_file_size: int, *, magic: bool = True,
             meta: bool = False) -> list[str]:
        """The manifest lines DLedger prints after load() + recover() of ``node_dir`` (with
        ``meta``, a last line ``CURRTERM <term> VOTEFOR <id or ->`` from its MemberState)."""
        flags = (["--magic"] if magic else []) + (["--meta"] if meta else [])
        proc = self.run("read", node_dir, data_file_size, index_file_size, *flags)
        return [line for line in proc.stdout.split("\n") if line]

    def write(self, node_dir, data_file_size: int, index_file_size: int, spec: list[tuple[int, bytes]],
              commit: int | None = None) -> list[str]:
        """Append ``(term, body)`` entries through DLedger's appendAsLeader (then vote for
        itself, which writes currterm); the manifest it then sees, and a last CURRTERM line."""
        os.makedirs(node_dir, exist_ok=True)
        spec_file = os.path.join(os.path.dirname(os.path.abspath(str(node_dir))), "spec.txt")
        with open(spec_file, "w") as fh:
            for term, body in spec:
                fh.write(f"{term} {body.hex() or '-'}\n")
            if commit is not None:
                fh.write(f"commit {commit}\n")
        proc = self.run("write", node_dir, data_file_size, index_file_size, spec_file, "--magic", "--meta")
        return [line for line in proc.stdout.split("\n") if line]

    def expected(self, project_lines: list[str]) -> list[str]:
        """What this version should print for a store the project reads as ``project_lines``:
        the same, except that DLedger 0.3+ keeps no committed index on disk (reports -1)."""
        if self.reads_checkpoint or not project_lines:
            return project_lines
        head = project_lines[0].split()
        head[head.index("COMMITTED") + 1] = "-1"
        return [" ".join(head)] + project_lines[1:]


def _resolve(label: str) -> str:
    if label != "latest-tag":
        return label
    best, best_v = None, None
    for tag in _git("tag", "--list").split():
        m = re.fullmatch(r"dledger(?:-all)?-(\d+(?:\.\d+)*)", tag)
        if m:
            v = tuple(int(x) for x in m.group(1).split("."))
            if best_v is None or v > best_v:
                best, best_v = tag, v
    if best is None:
        pytest.skip(f"no dledger-* tag in {MIRROR}")
    return best


def _cache_root(tmp_path_factory) -> str:
    root = os.environ.get("DLEDGERCTL_JAVA_CACHE") or os.path.expanduser("~/.cache/dledgerctl-java")
    try:
        os.makedirs(root, exist_ok=True)
        probe = os.path.join(root, f".probe-{os.getpid()}")
        open(probe, "w").close()
        os.remove(probe)
        return root
    except OSError:
        return str(tmp_path_factory.mktemp("dledger-java-cache"))


def _build(label: str, tmp_path_factory) -> DLedger:
    if not (shutil.which("javac") and shutil.which("java")):
        pytest.skip("javac/java not found on PATH")
    if not os.path.isdir(MIRROR):
        pytest.skip(f"DLedger git mirror not found at {MIRROR} (set DLEDGER_MIRROR)")
    ref = _resolve(label)
    try:
        commit = _git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()
    except subprocess.CalledProcessError:
        pytest.skip(f"{ref} not in the DLedger mirror {MIRROR}")
    paths = [p for p in _git("ls-tree", "-r", "--name-only", commit).split("\n")
             if p.endswith("src/main/java/" + STORE_CLASS)]
    if len(paths) != 1:
        pytest.skip(f"{ref}: cannot locate {STORE_CLASS} in one src/main/java tree ({paths})")
    src_root = paths[0][: -len(STORE_CLASS)].rstrip("/")

    api, bindings = _slf4j()
    compile_cp = [api]
    runtime_cp = [api] + bindings
    store_src = _git("show", f"{commit}:{paths[0]}")
    # DLedger 0.3+ DefaultMmapFile uses commons-lang3 (JavaVersion/SystemUtils)
    lang3 = [j for j in _jars("org/apache/commons/commons-lang3/*/commons-lang3-*.jar")
             if re.search(r"commons-lang3-3\.[\d.]+\.jar$", j)]
    if lang3:
        compile_cp.append(lang3[0])
        runtime_cp.append(lang3[0])
    elif _grep_ok(commit, "org.apache.commons.lang3", src_root):
        pytest.skip(f"{ref} needs commons-lang3 (store/file/DefaultMmapFile): no jar under {M2}")
    stubs_used = []
    for stub, jar_glob in STUBS.items():
        jars = _jars(jar_glob)
        if jars:
            compile_cp.append(jars[0])
            runtime_cp.append(jars[0])
        else:
            stubs_used.append(stub)

    h = hashlib.sha256()
    for part in [commit, open(HARNESS, "rb").read().decode(), *compile_cp, *stubs_used,
                 *(open(os.path.join(STUBS_DIR, s)).read() for s in stubs_used),
                 subprocess.run(["javac", "-version"], capture_output=True, text=True).stdout]:
        h.update(part.encode() + b"\0")
    out = os.path.join(_cache_root(tmp_path_factory), f"{ref}-{h.hexdigest()[:16]}")
    if not os.path.isfile(os.path.join(out, "DLedgerReadCheck.class")):
        work = tmp_path_factory.mktemp(f"build-{ref}")
        src = work / "src"
        stub_root = work / "stubs"
        classes = work / "classes"
        for d in (src, stub_root, classes):
            d.mkdir()
        archive = subprocess.run(["git", "-C", MIRROR, "archive", "--format=tar", commit, src_root],
                                 check=True, capture_output=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(src, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        for stub in stubs_used:
            os.makedirs(os.path.dirname(stub_root / stub), exist_ok=True)
            shutil.copy(os.path.join(STUBS_DIR, stub), stub_root / stub)
        # -sourcepath: javac compiles only the DLedger classes the harness reaches
        cmd = ["javac", "-nowarn", "-XDignore.symbol.file", *JAVAC_FLAGS, "-encoding", "UTF-8", "-d", str(classes),
               "-cp", os.pathsep.join(compile_cp),
               "-sourcepath", os.pathsep.join([str(src / src_root), str(stub_root)]), HARNESS]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            pytest.fail(f"compiling DLedger {ref} failed:\n{proc.stdout}\n{proc.stderr[-8000:]}")
        tmp_out = f"{out}.tmp-{os.getpid()}"
        shutil.rmtree(tmp_out, ignore_errors=True)
        shutil.copytree(classes, tmp_out)
        try:
            os.rename(tmp_out, out)
        except OSError:  # another session filled the cache first
            shutil.rmtree(tmp_out, ignore_errors=True)
    compiled = sorted(os.path.relpath(p, out)[:-6].replace(os.sep, ".")
                      for p in glob.glob(os.path.join(out, "io/openmessaging/**/*.class"), recursive=True)
                      if "$" not in p)
    reads_checkpoint = "COMMITTED_INDEX_KEY" in store_src
    return DLedger(label, ref, commit, out, runtime_cp, reads_checkpoint, compiled, stubs_used)


def _grep_ok(commit: str, needle: str, src_root: str) -> bool:
    proc = subprocess.run(["git", "-C", MIRROR, "grep", "-q", needle, commit, "--",
                           src_root + "/io/openmessaging/storage/dledger/store"], capture_output=True)
    return proc.returncode == 0


_BUILT: dict[str, DLedger] = {}


@pytest.fixture(scope="session")
def dledger_builds(tmp_path_factory):
    def get(label: str) -> DLedger:
        if label not in _BUILT:
            _BUILT[label] = _build(label, tmp_path_factory)
        return _BUILT[label]
    return get


@pytest.fixture(params=VERSIONS)
def dledger(request, dledger_builds) -> DLedger:
    return dledger_builds(request.param)


@pytest.fixture(params=CURRENT)
def dledger_current(request, dledger_builds) -> DLedger:
    return dledger_builds(request.param)


@pytest.fixture
def dledger_027(dledger_builds) -> DLedger:
    return dledger_builds("dledger-0.2.7")


# --- the project's side --------------------------------------------------------------------

def project_view(node, data_file_size=None, index_file_size=None) -> list[str]:
    """The store as the project reads it (read-only open), in the harness's line format with magic."""
    from store.filestore import FileStore

    with FileStore.open(str(node), read_only=True, data_file_size=data_file_size,
                        index_file_size=index_file_size) as s:
        head = f"END {s.end_index} {s.end_term} BEGIN {s.begin_index} COMMITTED {s.committed_index}"
        rows = [f"{e.index} {e.term} {e.pos} {e.size} {hashlib.sha256(e.body).hexdigest()} {e.magic}"
                for e in s.entries()]
    return [head] + rows


def layout_facts(node, data_file_size) -> dict:
    """What a store exercises: number of data/index files, sizes of the BLANK paddings."""
    blanks = []
    data_files = sorted(os.listdir(os.path.join(node, "data")))
    for name in data_files:
        with open(os.path.join(node, "data", name), "rb") as fh:
            buf = fh.read()
        off = 0
        while off + 8 <= len(buf):
            magic = int.from_bytes(buf[off:off + 4], "big", signed=True)
            size = int.from_bytes(buf[off + 4:off + 8], "big", signed=True)
            if magic == -1:
                blanks.append(size)
                assert off + size == data_file_size, f"{name}: BLANK at {off} of size {size}"
                break
            if size <= 0:
                break
            off += size
    return {"data_files": len(data_files), "index_files": len(os.listdir(os.path.join(node, "index"))),
            "blanks": blanks}


def assert_same(got: list[str], want: list[str], what: str) -> None:
    if got == want:
        return
    diffs = [f"line {i}: DLedger {g!r} != expected {w!r}" for i, (g, w) in enumerate(zip(got, want)) if g != w]
    raise AssertionError(f"{what}: {len(got)} lines from DLedger, {len(want)} expected; first differences:\n"
                         + "\n".join(diffs[:10]))


DSIZE, ISIZE = 4096, 256  # small files: ~10 entries per data file, 8 per index file


# --- (1) sanity: DLedger reproduces the reference manifests ------------------------------

def test_harness_runs_the_real_file_store(dledger):
    """The classes the harness runs are DLedger's own store, compiled from the mirror at the
    tag; the network layer (DLedgerServer and its rocketmq/netty dependencies) is not needed."""
    prefix = "io.openmessaging.storage.dledger."
    for cls in ("store.file.DLedgerMmapFileStore", "store.file.MmapFileList", "store.file.DefaultMmapFile",
                "entry.DLedgerEntryCoder", "MemberState", "DLedgerConfig"):
        assert prefix + cls in dledger.compiled, (cls, dledger.compiled)
    assert prefix + "DLedgerServer" not in dledger.compiled
    assert set(dledger.stubs_used) <= set(STUBS)


@pytest.mark.parametrize("name", sorted(FIXTURE_STORES))
def test_reference_fixture_manifest(dledger, tmp_path, name):
    node_name, dsize, isize = FIXTURE_STORES[name]
    node = tmp_path / node_name
    shutil.copytree(os.path.join(FIXTURES, name, node_name), node)
    for root, dirs, files in os.walk(node):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755 if n in dirs else 0o644)
    with open(os.path.join(FIXTURES, name, "manifest.txt")) as fh:
        manifest = [line for line in fh.read().split("\n") if line]
    got = dledger.read(node, dsize, isize, magic=False)
    assert_same(got, dledger.expected(manifest), f"DLedger {dledger.ref} on fixture {name}")


# --- (2)/(3) stores written by the project ------------------------------------------------

@pytest.mark.parametrize("with_crc", [True, False], ids=["crc", "no-crc"])
def test_project_store_read_identically(dledger, tmp_path, with_crc):
    node = tmp_path / "dledger-n0"
    write_project_store(node, count=130, terms=(1, 1, 2, 3, 3, 5), data_file_size=DSIZE, index_file_size=ISIZE,
                        max_size=900, committed=121, with_crc=with_crc)
    facts = layout_facts(node, DSIZE)
    assert facts["data_files"] >= 8 and facts["index_files"] >= 8 and len(facts["blanks"]) >= 5, facts
    want = project_view(node, DSIZE, ISIZE)
    assert len(want) == 131 and any(r.split()[3] == "48" for r in want[1:])  # empty bodies included
    before = file_digests(node)
    got = dledger.read(node, DSIZE, ISIZE)
    assert_same(got, dledger.expected(want), f"DLedger {dledger.ref} on a project store")
    # DLedger found every index record consistent with the data: it rebuilt or cut nothing
    assert file_digests(node) == before


def test_project_store_entries_filling_files(dledger, tmp_path):
    """Edge cases of placement: an entry that fills a file up to the 8 bytes a BLANK needs
    (the largest entry a file can hold), BLANKs of exactly 8 and of 16 bytes."""
    from store.filestore import FileStore

    dsize, isize = 1024, 64
    bodies = [b"x" * (dsize - 48 - 8), b"", b"y" * (dsize - 48 - 8 - 48 - 8), b"z" * 10, b"w" * (dsize - 48 - 8)]
    node = tmp_path / "dledger-n7"
    with FileStore.open(str(node), data_file_size=dsize, index_file_size=isize) as s:
        s.append_leader(bodies[:2], term=1)
        s.append_leader(bodies[2:], term=4)
        s.set_committed(3)
    assert layout_facts(node, dsize)["blanks"] == [8, 16, 1024 - 58]
    want = project_view(node, dsize, isize)
    before = file_digests(node)
    got = dledger.read(node, dsize, isize)
    assert_same(got, dledger.expected(want), f"DLedger {dledger.ref} on full-file entries")
    assert file_digests(node) == before


def test_project_noop_entry_current_reads_all(dledger_current, tmp_path):
    node = tmp_path / "dledger-n0"
    write_project_store(node, count=90, data_file_size=DSIZE, index_file_size=ISIZE, noop_at=84, committed=80)
    want = project_view(node, DSIZE, ISIZE)
    assert want[85].split()[5] == "2"
    before = file_digests(node)
    got = dledger_current.read(node, DSIZE, ISIZE)
    assert_same(got, dledger_current.expected(want), f"DLedger {dledger_current.ref} on a store with a no-op")
    assert file_digests(node) == before


def test_project_config_entry_current_reads_it_as_an_entry(dledger_current, tmp_path):
    """DLedger HEAD (and its latest tag) take magic 3 (its reserved CONFIG_CHANGE) as a valid
    entry: recovery reads the whole log and serves the config entry like any other (its state
    machine caller applies only magic 1; it changes no membership)."""
    node = tmp_path / "dledger-n0"
    write_project_store(node, count=90, data_file_size=DSIZE, index_file_size=ISIZE, config_at=84, committed=80)
    want = project_view(node, DSIZE, ISIZE)
    assert want[85].split()[5] == "3"
    got = dledger_current.read(node, DSIZE, ISIZE)
    assert_same(got, dledger_current.expected(want), f"DLedger {dledger_current.ref} on a store with a config entry")


def test_project_config_entry_in_last_two_files_0_2_7_stops_there(dledger_027, tmp_path):
    """0.2.7 knows only magic 1: its recovery ends the log before a config entry, as before a no-op."""
    node = tmp_path / "dledger-n0"
    write_project_store(node, count=90, data_file_size=DSIZE, index_file_size=ISIZE, config_at=86, committed=89)
    want = project_view(node, DSIZE, ISIZE)
    got = dledger_027.read(node, DSIZE, ISIZE)
    end_term = want[86].split()[1]
    assert_same(got, [f"END 85 {end_term} BEGIN 0 COMMITTED 85"] + want[1:87], "DLedger 0.2.7 before a config entry")


def _noop_store(node, noop_at, count=90):
    write_project_store(node, count=count, data_file_size=DSIZE, index_file_size=ISIZE, noop_at=noop_at,
                        committed=count - 1)
    return project_view(node, DSIZE, ISIZE)


def _data_file_of(row: str) -> int:
    return int(row.split()[2]) // DSIZE


def test_project_noop_in_last_two_files_0_2_7_stops_there(dledger_027, tmp_path):
    """0.2.7 knows only magic 1: recovery ends the log before the first no-op it walks over."""
    node = tmp_path / "dledger-n0"
    want = _noop_store(node, noop_at=86)
    last_file = int(sorted(os.listdir(node / "data"))[-1]) // DSIZE
    assert _data_file_of(want[87]) >= last_file - 1
    got = dledger_027.read(node, DSIZE, ISIZE)
    end_term = want[86].split()[1]
    # committed index 89 in the checkpoint is clamped to the new end, as the project would too
    assert_same(got, [f"END 85 {end_term} BEGIN 0 COMMITTED 85"] + want[1:87], "DLedger 0.2.7 before a no-op")


def test_project_noop_before_third_last_file_0_2_7_serves_it(dledger_027, tmp_path):
    """Real 0.2.7 behaviour that DESIGN.md's "up to the first no-op" does not cover (1/2).

    0.2.7 recovery walks from the third-last data file on. A no-op in an older file is never
    walked over, and 0.2.7 then serves the whole log, the no-op (magic 2) like any entry."""
    node = tmp_path / "dledger-n0"
    want = _noop_store(node, noop_at=5)
    assert _data_file_of(want[6]) < len(os.listdir(node / "data")) - 3
    got = dledger_027.read(node, DSIZE, ISIZE)
    assert_same(got, want, "DLedger 0.2.7 with a no-op before the third-last data file")


def test_project_noop_in_third_last_file_0_2_7_refuses_to_start(dledger_027, tmp_path):
    """Real 0.2.7 behaviour that DESIGN.md's "up to the first no-op" does not cover (2/2).

    A no-op that the walk reaches before the start of the second-last data file ends the walk
    more than one file before the last file: 0.2.7 logs "processOffset is too small" and
    calls System.exit(-1) instead of cutting the log."""
    probe = tmp_path / "probe" / "dledger-n0"
    rows = _noop_store(probe, noop_at=None)[1:]
    starts = sorted(int(n) for n in os.listdir(probe / "data"))
    third_last, second_last = starts[-3], starts[-2]
    # an entry inside the third-last file, not its first one (the walk must start before it)
    noop_at = next(int(r.split()[0]) for r in rows if third_last < int(r.split()[2]) < second_last)
    node = tmp_path / "dledger-n0"
    want = _noop_store(node, noop_at=noop_at)
    assert want[1:] != rows and [r.split()[:4] for r in want[1:]] == [r.split()[:4] for r in rows]
    proc = dledger_027.run("read", node, DSIZE, ISIZE, expect_rc=None)
    assert proc.returncode != 0 and "processOffset is too small" in proc.stderr, (proc.returncode,
                                                                                  proc.stderr[-2000:])


def test_project_meta_files_read_by_dledger(dledger, tmp_path):
    """checkpoint and currterm as the project writes them are what DLedger's MemberState and
    (0.2.x) store load: committed index, current term, vote (empty = none)."""
    from store.metafiles import write_currterm

    node = tmp_path / "dledger-n3"
    write_project_store(node, count=40, data_file_size=DSIZE, index_file_size=ISIZE, committed=33)
    write_currterm(str(node), 7, "n2")
    got = dledger.read(node, DSIZE, ISIZE, meta=True)
    assert got[-1] == "CURRTERM 7 VOTEFOR n2"
    want_committed = "33" if dledger.reads_checkpoint else "-1"
    assert got[0].endswith(f" COMMITTED {want_committed}"), got[0]
    write_currterm(str(node), 8, None)  # the previous content moves to currterm.bak
    assert os.path.isfile(node / "currterm.bak")
    assert dledger.read(node, DSIZE, ISIZE, meta=True)[-1] == "CURRTERM 8 VOTEFOR -"


# --- (4) after truncation and recovery cuts -------------------------------------------------

def test_project_store_after_cli_truncate_and_new_term(dledger, tmp_path):
    from dledgerctl.app import app
    from store.filestore import FileStore

    node = tmp_path / "dledger-n0"
    write_project_store(node, count=120, data_file_size=DSIZE, index_file_size=ISIZE, committed=60)
    cut_from = 97  # inside a data file, so the file holding the cut is kept and later ones removed
    r = CliRunner().invoke(app, ["store", "truncate", str(node), "--from-index", str(cut_from), "--yes",
                                 "--data-file-size", str(DSIZE), "--index-file-size", str(ISIZE)])
    assert r.exit_code == 0, r.output
    want = project_view(node, DSIZE, ISIZE)
    assert want[0].startswith(f"END {cut_from - 1} ")
    got = dledger.read(node, DSIZE, ISIZE)
    assert_same(got, dledger.expected(want), f"DLedger {dledger.ref} after store truncate")

    # a follower-like continuation: new entries in a later term over the cut region
    node2 = tmp_path / "again" / "dledger-n0"
    shutil.copytree(node, node2)
    with FileStore.open(str(node2), data_file_size=DSIZE, index_file_size=ISIZE) as s:
        s.append_leader(sample_bodies(30, seed=9, max_size=900), term=7)
    want = project_view(node2, DSIZE, ISIZE)
    assert len(want) == cut_from + 30 + 1
    before = file_digests(node2)
    got = dledger.read(node2, DSIZE, ISIZE)
    assert_same(got, dledger.expected(want), f"DLedger {dledger.ref} after truncate and new appends")
    assert file_digests(node2) == before


def test_project_store_after_purge_of_head_files(dledger, tmp_path):
    """Head data files deleted by ``store purge`` (and the index files below the new first
    entry): DLedger begins the log where the project does, at the first entry of the first
    data file left, and reads the rest the same, before and after more appends."""
    from dledgerctl.app import app
    from store.filestore import FileStore

    node = tmp_path / "dledger-n0"
    write_project_store(node, count=120, data_file_size=DSIZE, index_file_size=ISIZE, committed=100)
    r = CliRunner().invoke(app, ["store", "purge", str(node), "--before-index", "57", "--yes",
                                 "--data-file-size", str(DSIZE), "--index-file-size", str(ISIZE)])
    assert r.exit_code == 0, r.output
    want = project_view(node, DSIZE, ISIZE)
    begin = int(want[0].split()[4])
    assert 0 < begin <= 57 and not os.path.exists(node / "data" / f"{0:020d}")
    assert min(int(n) for n in os.listdir(node / "index")) + ISIZE > begin * 32  # none wholly below
    got = dledger.read(node, DSIZE, ISIZE)
    assert_same(got, dledger.expected(want), f"DLedger {dledger.ref} after store purge")

    with FileStore.open(str(node), data_file_size=DSIZE, index_file_size=ISIZE) as s:
        s.append_leader(sample_bodies(40, seed=11, max_size=900), term=9)
    want = project_view(node, DSIZE, ISIZE)
    assert want[0].split()[4] == str(begin) and len(want) == 1 + 160 - begin
    got = dledger.read(node, DSIZE, ISIZE)
    assert_same(got, dledger.expected(want), f"DLedger {dledger.ref} after purge and new appends")


def test_head_files_deleted_by_dledger_read_by_project(dledger, tmp_path):
    """The reverse of the purge test: DLedger's own clean-space deletion (files older than
    the reserved time, oldest first, never the last; then its begin index and the index
    files below) on a store, and the project reads what is left as DLedger does."""
    node = tmp_path / "dledger-n0"
    write_project_store(node, count=150, data_file_size=DSIZE, index_file_size=ISIZE, committed=149)
    names = sorted(os.listdir(node / "data"))
    now = time.time()
    for k, name in enumerate(names):  # the first four "expired" a day ago, the rest are new
        os.utime(node / "data" / name, (now - 86400, now - 86400) if k < 4 else (now + 3600, now + 3600))
    proc = dledger.run("purge", node, DSIZE, ISIZE, str(3600 * 1000), "--magic")
    assert "purge deleted 4 data files" in proc.stderr, proc.stderr[-2000:]
    got = [line for line in proc.stdout.split("\n") if line]
    assert sorted(os.listdir(node / "data")) == names[4:]
    want = project_view(node, DSIZE, ISIZE)
    assert int(want[0].split()[4]) > 0
    assert_same(got, dledger.expected(want), f"dledgerctl reading a store DLedger {dledger.ref} purged")
    from dledgerctl.app import app

    r = CliRunner().invoke(app, ["store", "verify", str(node), "--format", "json"])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize("damage", ["body-crc", "torn-tail", "bad-header"])
def test_project_store_after_recovery_cut(dledger, tmp_path, damage):
    from store.filestore import FileStore

    node = tmp_path / "dledger-n0"
    raw = write_project_store(node, count=110, data_file_size=DSIZE, index_file_size=ISIZE, committed=50)
    view = project_view(node, DSIZE, ISIZE)
    # a non-empty body; for body-crc the last entry (past the committed index, so recovery still
    # cuts it: a damaged body with sound entries after it is held since issue 58, not cut)
    victim = len(raw) - 1 if damage == "body-crc" else 102
    pos, size = int(view[victim + 1].split()[2]), int(view[victim + 1].split()[3])
    path = node / "data" / f"{pos - pos % DSIZE:020d}"
    rel = pos % DSIZE
    if damage == "body-crc":  # the project checks body CRCs, DLedger does not: the cut must still agree
        assert size > 48
        patch(path, rel + 48, bytes([raw[victim][48] ^ 0xFF]))
    elif damage == "torn-tail":  # the last entry half written
        last = int(view[-1].split()[2])
        victim = len(view) - 2
        lpath = node / "data" / f"{last - last % DSIZE:020d}"
        lsize = int(view[-1].split()[3])
        patch(lpath, last % DSIZE + lsize // 2, b"\0" * (lsize - lsize // 2))
        patch(lpath, last % DSIZE + 4, (lsize + 1000).to_bytes(4, "big"))
    else:  # a wrong index in the header
        patch(path, rel + 8, (victim + 5).to_bytes(8, "big"))
    with FileStore.open(str(node), data_file_size=DSIZE, index_file_size=ISIZE) as s:
        assert s.end_index == victim - 1, (damage, s.end_index, s.recovery)
    want = project_view(node, DSIZE, ISIZE)
    assert want[1:] == view[1:victim + 1]
    before = file_digests(node)
    got = dledger.read(node, DSIZE, ISIZE)
    assert_same(got, dledger.expected(want), f"DLedger {dledger.ref} after a {damage} recovery cut")
    assert file_digests(node) == before


# --- (5) the reverse: DLedger writes, the project reads ---------------------------------------

def _spec(count=100, seed=3):
    bodies = sample_bodies(count, seed=seed, max_size=900)
    terms = [1] * 30 + [2] * 25 + [4] * 25 + [5] * (count - 80)
    return list(zip(terms, bodies))


def test_dledger_written_store_read_by_project(dledger, tmp_path):
    from store.filestore import FileStore

    spec = _spec()
    node = tmp_path / "dledger-n0"
    from store.metafiles import read_currterm

    got = dledger.write(node, DSIZE, ISIZE, spec, commit=93)
    assert got.pop() == "CURRTERM 5 VOTEFOR n0"
    term_state = read_currterm(str(node))
    assert (term_state.term, term_state.vote_for) == (5, "n0")
    assert len(got) == len(spec) + 1
    facts = layout_facts(node, DSIZE)
    assert facts["data_files"] >= 8 and len(facts["blanks"]) >= 5, facts
    before = file_digests(node)
    want = project_view(node, DSIZE, ISIZE)
    # DLedger 0.2.x persists the committed index (checkpoint); 0.3+ keeps it in memory only,
    # so there the project finds no checkpoint and reads -1
    on_disk = "93" if dledger.reads_checkpoint else "-1"
    assert want[0] == f"END 99 5 BEGIN 0 COMMITTED {on_disk}"
    assert got[0] == "END 99 5 BEGIN 0 COMMITTED 93"
    assert_same(got[1:], want[1:], f"the project on a store DLedger {dledger.ref} wrote")
    # what DLedger wrote is the bodies it was given, in order, at the terms it was given
    assert [r.split()[1] for r in got[1:]] == [str(t) for t, _ in spec]
    assert [r.split()[4] for r in got[1:]] == [hashlib.sha256(b).hexdigest() for _, b in spec]
    # and a writable open recovers it without cutting or rewriting anything
    with FileStore.open(str(node), data_file_size=DSIZE, index_file_size=ISIZE) as s:
        assert s.end_index == len(spec) - 1
        assert not s.plan.cuts_data
    assert file_digests(node) == before


def test_dledger_and_project_write_identical_bytes(dledger, tmp_path):
    """Same entries, same terms: the project's writer (without CRCs) produces data and index
    files byte-identical to DLedger's appendAsLeader, BLANK paddings included."""
    from store.filestore import FileStore

    spec = _spec(seed=11)
    theirs = tmp_path / "java" / "dledger-n0"
    dledger.write(theirs, DSIZE, ISIZE, spec)
    ours = tmp_path / "py" / "dledger-n0"
    with FileStore.open(str(ours), data_file_size=DSIZE, index_file_size=ISIZE, with_crc=False) as s:
        for term, body in spec:
            s.append_leader([body], term=term)
    a, b = file_digests(theirs), file_digests(ours)
    assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
    differing = sorted(k for k in a if a[k] != b[k])
    if differing:
        first = differing[0]
        x, y = open(theirs / first, "rb").read(), open(ours / first, "rb").read()
        off = next(i for i in range(min(len(x), len(y))) if x[i] != y[i]) if len(x) == len(y) else None
        raise AssertionError(f"files differing from DLedger {dledger.ref}'s: {differing}; first at {first} "
                             f"offset {off}: DLedger {x[off:off + 16].hex() if off is not None else len(x)} "
                             f"vs ours {y[off:off + 16].hex() if off is not None else len(y)}")


def test_project_follower_of_dledger_leader(dledger, tmp_path):
    """Entries DLedger wrote as leader, stored by the project's follower path (byte for byte
    at the leader's positions), give data and index files identical to the leader's, and
    DLedger reads the follower's store as its own."""
    from store.filestore import FileStore

    spec = _spec(seed=5)
    leader = tmp_path / "leader" / "dledger-n0"
    dledger.write(leader, DSIZE, ISIZE, spec)
    follower = tmp_path / "follower" / "dledger-n1"
    with FileStore.open(str(leader), read_only=True, data_file_size=DSIZE, index_file_size=ISIZE) as src, \
            FileStore.open(str(follower), data_file_size=DSIZE, index_file_size=ISIZE) as dst:
        i = 0
        while i <= src.end_index:  # batches of a few entries, as pushes would carry them
            got = dst.append_follower(src.get_raw(i, 7, 1 << 20))
            i += len(got)
    assert file_digests(follower) == file_digests(leader)
    want = project_view(follower, DSIZE, ISIZE)
    got = dledger.read(follower, DSIZE, ISIZE)
    assert_same(got[1:], want[1:], f"DLedger {dledger.ref} on a project follower of a DLedger leader")
    assert got[0].split()[:5] == want[0].split()[:5]
