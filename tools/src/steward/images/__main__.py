"""``python -m steward.images``: the command line (:func:`steward.images.cli.main`)."""

import sys

from steward.images.cli import main

if __name__ == "__main__":
    sys.exit(main())
