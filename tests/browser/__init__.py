"""Test helpers for the Space tests (not collected: no test_ files here)."""
