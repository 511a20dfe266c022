"""The strategy advisor: `python -m xpdist advise`. It drives real runs through the driver, so it
sits above it: advise.py probes the candidates, plan.py ranks them (no TensorFlow), report.py
writes the answer."""
