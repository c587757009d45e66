"""``python -m flows.cli``: the same as ``proxima-fleet``."""

from flows.cli import main

main()
