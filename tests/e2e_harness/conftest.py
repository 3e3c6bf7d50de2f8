"""The harness smoke tests use the e2e fixtures registered in the root conftest (`e2e/fixtures.py`)."""
