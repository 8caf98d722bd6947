"""The worker conformance suite: checks a running worker against workers/CONTRACT.md.

    python -m pytest workers/conformance --worker-url http://127.0.0.1:PORT --worker-model NAME

Options (see `--help`, group "worker"): `--worker-tools` and `--worker-tool-choice` for the TOOL
rules, `--worker-allow RULE` for a known deviation (reported as xfail), `--worker-strict` to fail on
an unmet SHOULD. Every failure message starts with the rule id.
"""
