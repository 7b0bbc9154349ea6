"""The `specsim` console script.

Importing the command line loads pandas, scipy and matplotlib (a second or more on a cold disk).
A Ctrl-C in that window, or one before a command's own handler is in place, ends the way a Ctrl-C
inside a command does (cli/common.py user_errors): one line on stderr and exit 130, never a
traceback or a death by signal.

At exit the interpreter's last garbage collections walk every object that pandas, scipy and
matplotlib created, to free memory the process is about to hand back anyway: about 0.3 s on 2
cores after a run (the command line with matplotlib loaded: 0.35 s from the last atexit hook to the
process's end, 0.05 s with the objects frozen). `main` freezes them (gc.freeze) in its first
atexit hook, which runs last: every other hook (Ray's, a pool's) has run, files are closed by
their owners, and an object that only the collector would free goes with the process.
"""

from __future__ import annotations

import atexit
import gc
import sys

#: 128 + SIGINT, the shell's code for an interrupted command (= cli/common.py EXIT_INTERRUPTED)
EXIT_INTERRUPTED = 130


def main() -> None:
    """Import the command line and run it; an early Ctrl-C exits 130 with one line."""
    atexit.register(gc.freeze)
    try:
        from specsim.cli.app import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
