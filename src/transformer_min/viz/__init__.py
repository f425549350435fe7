"""Pictures of attention: heatmap files."""
