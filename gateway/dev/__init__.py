"""For a laptop, not a cluster: `sluicegate demo` and the embedded Redis it (and the tests) start. The
production image leaves this package out.
"""
