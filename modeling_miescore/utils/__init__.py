"""Small shared infrastructure outside the Hub files: atomic file writes, HTTP retries, declared settings."""
