"""The model of section 3: masks, attention, feed-forward, embeddings, positions, layers, the Transformer."""
