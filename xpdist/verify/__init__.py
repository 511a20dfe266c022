"""`python -m xpdist verify`: does a distributed run train the same model as one device?

cli.py is the command; command.py composes and checks the run and its one-device reference;
session.py runs both as jobs of the driver under one MLflow run and records the verdict;
compare.py holds the comparison and the tolerances (NumPy only); report.py what is printed and
logged. The task's side is xpdist/task/verify_recorder.py; docs/verify.md is the user's page.
"""
