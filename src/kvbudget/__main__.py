from kvbudget.cli.main import entry

entry()
