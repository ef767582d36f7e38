"""``python -m steward.manager``: run the manager until signalled (see ``--help``)."""

from steward.manager.server import main_cli

main_cli()
