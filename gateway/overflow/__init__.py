"""Overflow to external OpenAI-compatible providers when a model's own pools cannot serve in time
(docs/overflow.md): its configuration (`config.py`), the providers as this replica holds them
(`providers.py`), the decision (`decision.py`) and the call (`call.py`)."""
