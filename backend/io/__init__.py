"""Run folders: the streaming writer, the reader, summaries."""
