"""Convert: curated multi-agent trajectories → CoA SFT examples (``sft.v1``) and RL prompts
(``rl_prompt.v1``), plus exporters to the AFM layouts and a Hugging Face ``datasets`` folder."""
