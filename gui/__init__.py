"""The PySide6 window: app.py (the program's start), main_window.py (views, docks and menus),
worker.py (the run's QThread), and the state/, views/, panels/ and controllers/ it is made of."""
