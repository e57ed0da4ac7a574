"""What the window does, each part an object the main window owns and wires: runs (the worker's
traffic), files (open, export, save a plot), recent runs, references (add, remove, overlay),
Compare policies and its cache, tools (fit, worked example, plan, tour) and help. Each is given
what it needs and speaks through Qt signals; none reaches into another's state."""
