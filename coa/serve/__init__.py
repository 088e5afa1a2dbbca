"""coa.serve: a small completions server speaking vLLM's token-id protocol, on continuous batching.

``python -m coa.serve --model FOLDER [--port 0]`` serves a local Hugging Face model folder on CPU
(or a GPU) for the rollout engine's ``server`` policy and for anyone without vLLM: token ids in and
out with logprobs, LoRA adapters by name, full-weight updates (pause, update, resume) with a weight
version on every answer. On GPU workers the real vLLM takes its place (``infra/README.md``).

* :mod:`~coa.serve.engine`: :class:`ContinuousBatcher`, the step loop requests join and leave
  (also what the in-process ``hf_batched`` policy runs on the trainer's weights);
* :mod:`~coa.serve.weights`: a pushed state dict read and copied into the running model;
* :mod:`~coa.serve.app`: the routes (FastAPI);
* :mod:`~coa.serve.__main__`: the command line (uvicorn on 127.0.0.1).
"""
