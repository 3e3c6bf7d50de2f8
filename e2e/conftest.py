"""The e2e fixtures come from the root conftest (`pytest_plugins = ["e2e.fixtures"]`)."""
