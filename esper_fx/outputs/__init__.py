"""Run outputs: the run directory, events.jsonl and metrics.csv, checkpoints, per-batch history rows, the console, TensorBoard, Weights & Biases (optional), plots and report.html."""
