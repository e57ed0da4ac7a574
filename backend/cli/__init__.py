"""The command line: the sub-commands (run headless), their shared flags, the printed summary, doctor,
and the display check that runs before the window opens (which gui/app.py does: backend never imports the gui)."""
