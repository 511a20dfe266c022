"""`python -m xpdist` and the `xpdist` command: the driver (xpdist/driver/main.py).

The standby task starts here, before Hydra is imported (xpdist/driver/processes/standby.py).
`python -m xpdist docs [PAGE]` prints where the documentation is (xpdist/core/docs.py);
`python -m xpdist advise [budget_s=N] OVERRIDES` probes strategies and recommends one (docs/advisor.md).
`python -m xpdist verify [verify.steps=N] OVERRIDES` checks a run against one device (docs/verify.md).
"""

import sys

from xpdist.driver.processes import standby


def cli() -> None:
    if sys.argv[1:2] == ["docs"]:  # `python -m xpdist docs [PAGE]`: where the documentation is
        from xpdist.core import docs

        sys.exit(docs.cli(sys.argv[2:]))
    if sys.argv[1:2] == ["advise"]:  # `python -m xpdist advise ...`: the strategy advisor (xpdist/advisor/advise.py)
        from xpdist.advisor import advise

        sys.exit(advise.cli(sys.argv[2:]))
    if sys.argv[1:2] == ["verify"]:  # `python -m xpdist verify ...`: a run against one device (xpdist/verify/)
        from xpdist.verify import cli as verify

        verify.main(sys.argv[2:])
    standby.start(sys.argv[1:])
    try:
        from xpdist.driver import main  # after the standby task's start: importing Hydra takes 0.25 s
    except KeyboardInterrupt:  # Ctrl-C before the driver's own handlers are set
        standby.discard()
        print("xpdist: interrupted by SIGINT", file=sys.stderr)
        sys.exit(130)
    from xpdist import plugins

    plugins.register()
    main.cli()


if __name__ == "__main__":
    cli()
