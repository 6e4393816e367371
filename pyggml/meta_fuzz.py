"""`python -m pyggml.meta_fuzz`: random graphs split over a meta device (pyggml.testing.meta_fuzz)."""

import sys

from pyggml.testing.meta_fuzz import main

if __name__ == "__main__":
    sys.exit(main())
