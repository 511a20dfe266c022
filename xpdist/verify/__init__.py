"""`python -m xpdist verify`: does a distributed run train the same model as one device?

command.py drives the two trainings through the driver and records the verification;
compare.py holds the comparison (NumPy only); tolerances live there. docs/verify.md is the
user's page.
"""
