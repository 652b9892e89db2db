"""``kvbudget report``: one self-contained page for one deployment.

``collect`` gathers the numbers (each from the same library call as the CLI command that prints it) into a
``Report``; ``html`` renders it as one offline HTML page with inline SVG charts (``svg``), ``markdown`` as
Markdown for a pull request or a ticket, and ``Report.to_dict`` is the ``--json`` document.
"""
