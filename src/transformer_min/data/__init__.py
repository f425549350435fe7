"""Real translation data (section 5.1): parallel text, a shared subword vocabulary, token batches."""
