"""The command line: no sub-command opens the window; sub-commands run headless."""
