"""The HTTP edge: the server and its bounds on one client connection (server.py), the Starlette
routes for the client APIs, and the middleware that gives every request its ids, access-log line
and request metrics.
"""
