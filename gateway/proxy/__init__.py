"""One API request from admission to settlement (pipeline.py), and what it needs on the way: client-API
dialects, worker calls, the stream relay, usage checks, worker errors re-told.
"""
