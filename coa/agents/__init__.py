"""An OAgents-style multi-agent teacher, built for distillation into Chain-of-Agents trajectories.

A manager plans and delegates to a search agent and a code agent, a reflection step grades the run,
a verification step scores the suggested answer (re-plan below 3), and every step — every agent's
reasoning, tool calls with their observations, plans, reflections with grades, verification scores
— is recorded as ``trajectory.v1``. The model behind the agents is any :class:`ModelBackend`: an
OpenAI-compatible endpoint in real use, or the rule-based offline backend for the embedded demo.
"""
