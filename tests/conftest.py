"""Shared test configuration. Fakes live in the test files that need them."""
