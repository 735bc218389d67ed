"""Paper contributions: upload, automatic checks, review, and publishing releases."""
