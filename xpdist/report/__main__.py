from xpdist.report import cli

cli()
