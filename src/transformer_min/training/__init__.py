"""Training (section 5): the optimizer and schedule, the loss, the trainer loop and its hooks, checkpoints, the Task protocol."""
