"""What the window's menus and buttons do beyond one run: File (open, export), references (add,
remove, overlay), and Compare policies (a series of runs saved as references)."""
