"""``python -m glance_rbd_native``: the ``glance-rbd-native`` command (``cli``)."""

import sys

from glance_rbd_native.cli import main

sys.exit(main())
