"""Several replicas of the rollout server (``rl.rollout.server.replicas``): every weight push goes to
each, and the rollout client spreads its requests over them.

A replica is another engine serving the same model (e.g. one per node, beside or apart from the
trainer's nodes). :class:`ReplicaSync` holds one :class:`~coa.rl.server.WeightSync` per replica,
each with its own engine client, so each replica's version ledger stamps the requests sent to it
with the version *that* replica holds (versions stamped per replica), and its own folder of pushed
weights (``r<i>/v<version>/``; a replica loads from a filesystem it shares with rank 0). A push
returns once every replica has loaded the version. :class:`ReplicaPolicy` sends each generation to
the next replica in turn (one :class:`~coa.rollout.policies.endpoint.EndpointPolicy` per replica,
each with its own connection pool and seed stream) and counts the generations each replica served.
With one replica neither is used: the hook keeps the plain ``WeightSync`` and ``EndpointPolicy``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coa.llm.config import EndpointConfig
from coa.rl.server import WeightSync
from coa.rollout import Generation, Sampling


def replica_endpoints(endpoint: EndpointConfig) -> list[EndpointConfig]:
    """The server of ``endpoint`` followed by each of its ``replicas`` (the same model and engine at
    another base URL)."""
    replicas: Sequence[str] = getattr(endpoint, "replicas", ())
    others = [
        endpoint.model_copy(update={"base_url": url, "base_url_env": None, "name": f"{endpoint.name}-r{i}"})
        for i, url in enumerate(replicas, start=1)
    ]
    return [endpoint, *others]


class ReplicaSync:
    """Pushes each version to every replica (one :class:`WeightSync`, one engine client each)."""

    def __init__(self, endpoints: Sequence[EndpointConfig], folder: Path, **kw: Any) -> None:
        self.syncs = [WeightSync(e, folder / f"r{i}", **kw) for i, e in enumerate(endpoints)]

    @property
    def engine(self) -> Any:
        """The first replica's client (the checks every replica shares, e.g. TIS's)."""
        return self.syncs[0].engine

    @property
    def engines(self) -> list[Any]:
        return [s.engine for s in self.syncs]

    @property
    def version(self) -> int | None:
        """The version every replica holds (None until all hold the same one)."""
        versions = {s.version for s in self.syncs}
        return versions.pop() if len(versions) == 1 else None

    @version.setter
    def version(self, value: int | None) -> None:
        for s in self.syncs:
            s.version = value

    @property
    def pushes(self) -> int:
        """Versions pushed to every replica."""
        return min(s.pushes for s in self.syncs)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.syncs)

    @property
    def versions(self) -> list[int]:
        """The version each replica's ledger holds (what its next request is stamped with)."""
        return [s.engine.ledger.current for s in self.syncs]

    def check(self) -> None:
        for s in self.syncs:
            s.check()

    def push(self, model: Any, version: int) -> None:
        for s in self.syncs:
            s.push(model, version)

    def adopt(self, version: int) -> None:
        """Another rank pushed ``version`` to every replica: stamp this rank's requests with it."""
        for s in self.syncs:
            s.version = s.engine.ledger.current = version

    def mismatches(self) -> int:
        return sum(s.engine.ledger.mismatches for s in self.syncs)

    def clean(self) -> None:
        for s in self.syncs:
            s.clean()


class ReplicaPolicy:
    """One rollout policy over several replicas: each generation goes to the next replica in turn."""

    def __init__(self, policies: Sequence[Any]) -> None:
        self.policies = list(policies)
        self.name = self.policies[0].name
        self.codec = self.policies[0].codec
        self._turn = itertools.cycle(range(len(self.policies)))
        self.served = [0] * len(self.policies)
        """Generations each replica served."""

    async def start(self) -> None:
        for policy in self.policies:
            await policy.start()

    async def stop(self) -> None:
        for policy in self.policies:
            await policy.stop()

    async def generate(
        self, prompt_ids: Sequence[int], max_new_tokens: int, sampling: Sampling
    ) -> Generation:
        i = next(self._turn)
        self.served[i] += 1
        generation: Generation = await self.policies[i].generate(prompt_ids, max_new_tokens, sampling)
        return generation
