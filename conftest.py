"""Root pytest configuration: fixture modules shared by every test file are plugins here."""

pytest_plugins = ["tests.support.pmcd", "tests.support.ci", "pytester"]
