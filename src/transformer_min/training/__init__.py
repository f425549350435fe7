"""Training (section 5): the optimizer and schedule, the loss, synthetic tasks, the trainer, checkpoints."""
