import sys

from .app import app
from .common import quiet_closed_stdout


def main() -> None:
    try:
        app()
    finally:
        # what is still buffered for stdout, written now: a reader gone by then is no error
        # either (the interpreter's own last flush would print "Exception ignored ...")
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            quiet_closed_stdout()


if __name__ == "__main__":
    main()
