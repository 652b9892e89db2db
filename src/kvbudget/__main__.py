from kvbudget.cli import entry

entry()
