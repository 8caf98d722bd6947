"""The HTTP edge: Starlette routes for the client APIs, and the middleware that gives every request its
ids, access-log line and request metrics.
"""
