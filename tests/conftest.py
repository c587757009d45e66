"""The suite's fixtures all come from the test kit's plugin (``testkit/fixtures.py``)."""

pytest_plugins = ["testkit.fixtures"]
