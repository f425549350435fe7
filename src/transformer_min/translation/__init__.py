"""Translation: turning text into text with a trained model, and scoring it."""
