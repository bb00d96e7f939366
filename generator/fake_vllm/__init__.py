"""Stand-ins for the vLLM code path that wedges, named like vLLM's so stack dumps look real.

The file paths contain ``vllm/compilation/cuda_graph.py`` and
``vllm/v1/worker/gpu_model_runner.py`` as substrings, and the function names
follow vLLM's (``CUDAGraphWrapper.__call__`` -> ``replay``; the host-side wait
in ``get_output`` -> ``_sync_output``), so a py-spy dump of a wedged fake
engine classifies like a wedged real one.
"""
