"""Decoding (section 6.1): greedy and beam search over a trained model."""
