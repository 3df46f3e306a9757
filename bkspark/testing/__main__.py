"""``python -m bkspark.testing build|resolve``: build the project's images, or print what ``auto`` picks
(bkspark.testing.images; the Makefile's ``containers`` target runs ``build``)."""

import sys

from bkspark.testing.images import main

sys.exit(main())
