"""What a run leaves: run folders (export.py: the streaming writer and the reader), the summary
(summary.py), statistics and repeats (stats.py, repeats.py), comparisons (compare.py), figures
(figures.py, plots.py) and cost per million tokens (cost.py)."""
