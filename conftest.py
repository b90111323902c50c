"""Root pytest configuration: fixture modules shared by every test file are plugins here."""
