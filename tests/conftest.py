"""The suite's fixtures all come from the test kit's plugin (``testkit/fixtures.py``); its lanes
(what each test needs, which tests share one xdist worker) from ``testkit/lanes.py``."""

pytest_plugins = ["testkit.fixtures", "testkit.lanes"]
