"""What every HTTP-facing layer may use without importing the proxy: the request record
(context.py), reading a bounded body (body.py), and the trusted proxy networks (networks.py)."""
