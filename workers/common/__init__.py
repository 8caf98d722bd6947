"""What every worker here shares: the OpenAI wire format as vLLM writes it, and its ASGI plumbing.

- `errors`: the OpenAI error envelope, and `RequestError`, the exception a worker answers with it.
- `framing`: the bytes of answers and SSE chunks, byte for byte vLLM's.
- `streaming`: a raw-ASGI response, and running work only while its client stays.

The fake worker (a test double) and the Reframr worker (a production worker) both build on these;
neither imports the other.
"""
