"""Small shared infrastructure outside the Hub files: atomic file writes and HTTP retries."""
