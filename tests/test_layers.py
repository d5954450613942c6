"""The house keeps its shape: who may import whom, read from the sources' imports.

- ``store``: the on-disk formats and the file store; imports neither ``cluster`` nor the
  command line.
- ``cluster.raft``: the pure rules; imports ``store`` only, and no sockets, event loop,
  threads or clock of its own.
- ``cluster.net``: bytes and connections; imports ``store``, and of ``cluster.raft`` only
  its message types (rpc) and its peer and setting types (config).
- ``cluster.node``: one process; imports ``cluster.raft``, ``cluster.net`` and ``store``.
- ``dledgerctl.pipeline`` imports ``store`` (and pyspark); only the command line imports
  typer, rich, tabulate or click.
Every module of ``cluster`` and of the command line stays under about 600 lines.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OURS = ("store", "cluster", "dledgerctl")
CLI_ONLY = ("typer", "rich", "tabulate", "click", "click_log")
RAFT_FORBIDDEN = ("asyncio", "socket", "ssl", "selectors", "threading", "time", "concurrent", "uvloop", "subprocess")


def modules() -> list[tuple[str, str]]:
    """(dotted name, path) of every Python module of the project's packages."""
    out = []
    for top in OURS:
        for folder, dirs, names in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "__"))]
            for n in names:
                if n.endswith(".py"):
                    rel = os.path.relpath(os.path.join(folder, n), ROOT)[:-3].replace(os.sep, ".")
                    out.append((rel[: -len(".__init__")] if rel.endswith(".__init__") else rel, os.path.join(folder, n)))
    return sorted(out)


def imports(name: str, path: str) -> set[str]:
    """The modules ``path`` imports, relative ones resolved, as dotted names."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), path)
    package = name if path.endswith("__init__.py") else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)  # (from pkg import module)
    return out


MODULES = modules()


def _under(mod: str, prefix: str) -> bool:
    return mod == prefix or mod.startswith(prefix + ".")


def allowed(importer: str, mod: str) -> bool:
    """May module ``importer`` import ``mod`` (one of the project's)?"""
    if _under(importer, "store"):
        return _under(mod, "store")
    if _under(importer, "cluster.raft"):
        return _under(mod, "store") or _under(mod, "cluster.raft")
    if _under(importer, "cluster.net"):
        return (_under(mod, "store") or _under(mod, "cluster.net") or _under(mod, "cluster.raft.rpc")
                or _under(mod, "cluster.raft.config") or mod in ("cluster", "cluster.raft"))
    if _under(importer, "cluster.node"):
        return _under(mod, "store") or _under(mod, "cluster")
    if _under(importer, "dledgerctl.pipeline"):
        return _under(mod, "store") or _under(mod, "dledgerctl.pipeline") or mod == "dledgerctl"
    return True


@pytest.mark.parametrize("name, path", MODULES, ids=[n for n, _ in MODULES])
def test_imports_go_only_the_ways_the_layers_allow(name, path):
    wrong = sorted(m for m in imports(name, path) if m.split(".")[0] in OURS and not allowed(name, m))
    assert not wrong, f"{name} imports {wrong}"


@pytest.mark.parametrize("name, path", [m for m in MODULES if not m[0].startswith("dledgerctl")],
                         ids=[n for n, _ in MODULES if not n.startswith("dledgerctl")])
def test_only_the_command_line_imports_its_libraries(name, path):
    got = sorted(m for m in imports(name, path) if m.split(".")[0] in CLI_ONLY)
    assert not got, f"{name} imports {got}"


@pytest.mark.parametrize("name, path", [m for m in MODULES if _under(m[0], "cluster.raft")],
                         ids=[n for n, _ in MODULES if _under(n, "cluster.raft")])
def test_the_rules_have_no_io_of_their_own(name, path):
    got = sorted(m for m in imports(name, path) if m.split(".")[0] in RAFT_FORBIDDEN)
    assert not got, f"{name} imports {got}: the rules take time and I/O from their caller"


def test_the_three_rooms_are_all_there_is():
    top = sorted(n for n, _ in MODULES if n.count(".") == 1 and n.startswith("cluster."))
    assert top == ["cluster.net", "cluster.node", "cluster.raft"], top


SIZE_LIMIT = 600  # lines: split a module by concern before it grows past this


# (not yet store/, whose filestore.py is 1,019 lines, nor dledgerctl.pipeline, whose batches.py is 637)
SIZED = [m for m in MODULES if _under(m[0], "cluster")
         or (_under(m[0], "dledgerctl") and not _under(m[0], "dledgerctl.pipeline"))]


@pytest.mark.parametrize("name, path", SIZED, ids=[n for n, _ in SIZED])
def test_no_module_of_the_cluster_or_the_command_line_grows_past_the_limit(name, path):
    with open(path, encoding="utf-8") as fh:
        lines = sum(1 for _ in fh)
    assert lines <= SIZE_LIMIT, f"{name} has {lines} lines: split it by concern"
