"""The ``askgate`` command line. The server commands arrive with the transports."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args in ([], ["--version"]):
        from askgate import __version__

        print(f"askgate {__version__}")
        return 0
    print(f"askgate: unknown command {' '.join(args)!r}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
