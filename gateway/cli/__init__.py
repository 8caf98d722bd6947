"""`sluicegate`: serve, demo, check-config, and admin commands over the admin API.

main.py         the parser (every subcommand with an example) and main()
client.py       AdminClient: the admin API over HTTP (stdlib only)
admin_cmds.py   teams and keys
report_cmds.py  usage and audit
serving.py      serve, check-config, demo
flags.py        flag types and the shared limit flags
render.py       tables, records, times
"""

from gateway.cli.client import AdminClient, CliError, CliUsageError
from gateway.cli.flags import duration
from gateway.cli.main import build_parser, main
from gateway.cli.serving import load_table

__all__ = ["AdminClient", "CliError", "CliUsageError", "build_parser", "duration", "load_table", "main"]
