"""Client APIs: what is specific to one wire format, behind one interface (`base.Dialect`).

The pipeline knows only that interface; every worker speaks the OpenAI chat contract
(workers/CONTRACT.md), so a dialect translates the client's body to the worker's and the worker's
answer back, and renders errors and rate-limit headers in its own envelope.
"""
