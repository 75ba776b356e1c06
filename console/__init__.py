"""The operator console: console/server.py serves memagent/operator/console.html and forwards
to the admin API; run with `make console`."""
