"""``dledgerctl`` (the console script) and ``python -m dledgerctl``.

Ctrl-C is exit 130 without a traceback at any moment: while the modules load (the first
half second: the try around the import below), while typer builds the commands (main's),
and in a command (typer's own handling, or the command's).
"""

import sys

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended


def _interrupted_exit() -> None:
    """Exit 130 after a caught Ctrl-C. CPython 3.11 records a KeyboardInterrupt raised inside
    code that ``eval``/``exec`` compiled from a string (a namedtuple or a dataclass being built,
    as happens while modules load) as unhandled, even when a caller catches it, and at exit kills
    the process with SIGINT instead of returning the exit code (seen: -2 for one Ctrl-C in three
    during ``--version``'s imports). The record is cleared here, where the interrupt is handled;
    an interpreter without it is left as it is."""
    forget_unhandled_interrupt()
    sys.exit(INTERRUPTED)


def forget_unhandled_interrupt() -> None:
    try:
        import ctypes

        ctypes.c_int.in_dll(ctypes.pythonapi, "_Py_UnhandledKeyboardInterrupt").value = 0
    except (ImportError, ValueError, AttributeError, OSError):
        pass


try:
    from .app import app
    from .basics import quiet_closed_stdout
except KeyboardInterrupt:
    _interrupted_exit()


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        _interrupted_exit()
    except SystemExit as done:
        if done.code == INTERRUPTED:  # (a command that caught Ctrl-C itself)
            forget_unhandled_interrupt()
        raise
    finally:
        # what is still buffered for stdout, written now: a reader gone by then is no error
        # either (the interpreter's own last flush would print "Exception ignored ...")
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            quiet_closed_stdout()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
