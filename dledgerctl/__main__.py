"""``dledgerctl`` (the console script) and ``python -m dledgerctl``.

Ctrl-C is exit 130 without a traceback at any moment: while the modules load (the first
half second: the try around the import below), while typer builds the commands (main's),
and in a command (typer's own handling).
"""

import sys

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a process Ctrl-C ended

try:
    from .app import app
    from .basics import quiet_closed_stdout
except KeyboardInterrupt:
    sys.exit(INTERRUPTED)


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
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
