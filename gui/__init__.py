"""The PySide6 window: app.py (the program's start), main_window.py (docks and menus),
worker.py (the run's QThread), and the state/, views/, panels/ and actions/ it is made of."""
