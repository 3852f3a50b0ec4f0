"""Evaluation: episodes of frozen controllers on held-out seeds, paired comparisons of arms with their statistics and figure, and the Ray evaluation tasks."""
