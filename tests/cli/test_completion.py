"""Shell completion (``dledgerctl completion bash|zsh|fish``): the scripts, and what they
complete through the command itself, in a real bash for bash: groups, commands, options,
and member ids from --peers or from the cluster recorded in --base-dir."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)


def script(shell: str) -> str:
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "completion", shell], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def record(tmp_path) -> str:
    base = tmp_path / "c"
    base.mkdir()
    (base / "cluster.json").write_text(json.dumps({
        "group": "default", "peers": "a1-127.0.0.1:1;b2-127.0.0.1:2;b3-127.0.0.1:3", "base_dir": str(base),
        "nodes": [{"id": i, "pid": None, "address": "127.0.0.1:1", "cmd": []} for i in ("a1", "b2", "b3")]}))
    return str(base)


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
@pytest.mark.parametrize("words,cword,want", [
    (["dledgerctl", "clu"], 1, ["cluster"]),
    (["dledgerctl", "peer", "wat"], 2, ["watermarks"]),
    (["dledgerctl", "node", "start", "--heartbeat-i"], 3, ["--heartbeat-interval"]),
    (["dledgerctl", "cluster", "stop", "--base-dir", "BASE", ""], 5, ["a1", "b2", "b3"]),
    (["dledgerctl", "get", "--base-dir", "BASE", "--node", "b"], 5, ["b2", "b3"]),
    (["dledgerctl", "peer", "transfer-leader", "--peers", "x7-127.0.0.1:1;y8-127.0.0.1:2", "--to", ""], 6,
     ["x7", "y8"]),
    (["dledgerctl", "kv", "get", "--base-dir", "/nonexistent/dir", "--node", ""], 6, []),
])
def test_bash_completes_through_the_script(tmp_path, words, cword, want):
    base = record(tmp_path)
    words = [base if w == "BASE" else w for w in words]
    prog = (f"source <(dledgerctl completion bash)\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
            f"COMP_CWORD={cword}\n_dledgerctl_completion dledgerctl\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    r = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"]})
    assert r.returncode == 0, r.stderr
    assert [w for w in r.stdout.split("\n") if w] == want, (r.stdout, r.stderr)


def test_zsh_and_fish_scripts_speak_to_the_command(tmp_path):
    assert script("zsh").startswith("#compdef dledgerctl") and "_DLEDGERCTL_COMPLETE=complete_zsh" in script("zsh")
    assert "complete --command dledgerctl" in script("fish")
    base = record(tmp_path)
    for shell, extra in (("zsh", {}), ("fish", {"_TYPER_COMPLETE_FISH_ACTION": "get-args"})):
        env = {**os.environ, "_DLEDGERCTL_COMPLETE": f"complete_{shell}",
               "_TYPER_COMPLETE_ARGS": f"dledgerctl cluster start --base-dir {base} ", **extra}
        r = subprocess.run([os.path.join(BIN, "dledgerctl")], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and all(i in r.stdout for i in ("a1", "b2", "b3")), (shell, r.stdout, r.stderr)


def test_an_unknown_shell_is_a_usage_error():
    r = subprocess.run([sys.executable, "-m", "dledgerctl", "completion", "tcsh"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "tcsh" in r.stderr
