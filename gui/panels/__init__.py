"""The window's panels and docks: the controls (model, profile, run kinds), the run form and its
fields, the references dock, and the status bar."""
