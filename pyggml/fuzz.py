"""`python -m pyggml.fuzz`: the random-call fuzzer of the Python layer (pyggml.testing.fuzz)."""

import sys

from pyggml.testing.fuzz import main

if __name__ == "__main__":
    sys.exit(main())
