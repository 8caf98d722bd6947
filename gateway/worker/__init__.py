"""The one HTTP/1.1 client for every call to a worker (the request's own, a stored response read
back, a token count, health probes, load scrapes): the same bounds, TLS and retry rule everywhere
(client.py; one connection in connection.py; the closed set of errors and the target in http.py)."""
