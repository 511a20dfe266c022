"""The process toolbox every engine (xpdist/driver/engines/) shares.

    process.py    start a task in its own process group, forward signals, stop it
    outcome.py    how a task ended, read from its exit code and TaskResult
    follow.py     the chief's log followed to the terminal
    localhost.py  cluster=localhost's task processes and their watch

Which of them a `cluster` option uses, and when, is its engine's business.
"""
