"""The operator console (console/server.py, console/index.html): run with `make console`."""
