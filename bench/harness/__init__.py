"""Shared pieces of the Sluicegate benchmarks (bench/gateway_bench.py, bench/vllm_bench.py).

* `cpu`: /proc accounting (process CPU and memory, foreign CPU on the machine), pinning, machine facts;
* `procs`: starting and stopping child processes (mock workers, the gateway stack), the watchdog;
* `vllm`: one real vLLM server from workers/vllm, started and stopped by this run only;
* `load`: the aiohttp closed-loop load generator and its phases;
* `report`: the PASS/MISS table, per-phase detail lines, noise warnings, JSON;
* `profile`: py-spy phases and the collapsed-stack summary;
* `cli`: the shared flags and running to a printed report.

The benchmarks run as scripts (`python bench/<name>.py`), so `bench/` is on sys.path and this package
imports as `harness`.
"""
