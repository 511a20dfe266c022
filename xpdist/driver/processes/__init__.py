"""The process plumbing the engines (xpdist/driver/engines/) and the standby share.

    process.py    start a task in its own process group, forward signals, stop it
    follow.py     the chief's log followed to the terminal
    localhost.py  cluster=localhost's task processes and their watch
    spawn.py      a task process started with the standard library alone
    standby.py    the standby task, forked into the job's task processes

Which of them a `cluster` option uses, and when, is its engine's business.
"""
