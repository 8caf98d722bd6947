"""What every client API's translation shares (the APIs themselves live in gateway.apis): opening
a body (body.py), a native API's body forwarded as sent (native.py), a model's rules applied after
resolution (model_rules.py), what a translation dropped (ignored.py), tool names flattened and
named back (tool_names.py), system messages folded where chat templates accept them
(chat_shape.py). Here, below gateway.apis, so the pipeline can use them without importing an API.
"""
