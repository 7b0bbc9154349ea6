"""The `specsim` console script.

Importing the command line loads pandas, scipy and matplotlib (a second or more on a cold disk).
A Ctrl-C in that window, or one before a command's own handler is in place, ends the way a Ctrl-C
inside a command does (cli/common.py user_errors): one line on stderr and exit 130, never a
traceback or a death by signal.
"""

from __future__ import annotations

import sys

#: 128 + SIGINT, the shell's code for an interrupted command (= cli/common.py EXIT_INTERRUPTED)
EXIT_INTERRUPTED = 130


def main() -> None:
    """Import the command line and run it; an early Ctrl-C exits 130 with one line."""
    try:
        from specsim.cli.app import main as cli_main

        cli_main()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        raise SystemExit(EXIT_INTERRUPTED) from None
