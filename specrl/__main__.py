"""``python -m specrl`` is the ``specrl`` command (:mod:`specrl.cli`)."""

import sys

from specrl.cli import main

if __name__ == "__main__":
    sys.exit(main())
