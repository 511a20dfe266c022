"""`python -m xpdist` and the `xpdist` command: the driver (xpdist/driver/main.py).

The standby task starts here, before Hydra is imported (xpdist/driver/standby.py).
"""

import sys

from xpdist.driver import standby


def cli() -> None:
    standby.start(sys.argv[1:])
    try:
        from xpdist.driver import main  # after the standby task's start: importing Hydra takes 0.25 s
    except KeyboardInterrupt:  # Ctrl-C before the driver's own handlers are set
        standby.discard()
        print("xpdist: interrupted by SIGINT", file=sys.stderr)
        sys.exit(130)
    main.cli()


if __name__ == "__main__":
    cli()
