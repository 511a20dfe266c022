"""`python -m xpdist`: the driver (xpdist/driver/main.py)."""

from xpdist.driver.main import cli

if __name__ == "__main__":
    cli()
