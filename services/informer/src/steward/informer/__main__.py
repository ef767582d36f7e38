"""``python -m steward.informer``: run the informer until signalled (see ``--help``)."""

from steward.informer.server import main_cli

main_cli()
