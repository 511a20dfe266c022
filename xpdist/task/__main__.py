"""`python -m xpdist.task <job dir>`: one task process (xpdist/task/main.py)."""

from xpdist.task.main import exit_now, main

if __name__ == "__main__":
    exit_now(main())
