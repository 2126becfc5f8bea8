"""``python -m app.cli``: the ``runq`` command without its console script."""

import sys

from app.cli.main import main

sys.exit(main())
