"""kvbudget's command line: one module per command group (options -> request -> result -> render).

``kvbudget.cli.main`` holds the parser, ``main`` and ``entry`` (the console script); ``kvbudget.cli.options`` maps
parsed options to the library's typed requests. Nothing in the core imports this package.
"""
