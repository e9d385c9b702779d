"""``python -m vsekit`` = ``vse``."""

import sys

from vsekit.cli import main

sys.exit(main())
