"""`rubricd`: the operator's and researcher's command line.

One module per command group (`tail`, `status`, `rubrics`, `memory`, `dlq`);
each adds its subcommands to the parser and runs them against the deployment
that the RUBRICD_* settings (the services' own) name.
"""
