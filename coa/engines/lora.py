"""The LoRA adapters an engine holds for a run, one name per weight version (``<model>-v<V>``).

What vLLM's and SGLang's adapters share: a push loads the version's adapter under a new name (both
engines key their prefix caches on the adapter, and a request keeps the adapter it named to its
end), a request stamped with version ``V`` names ``V``'s adapter, old versions are unloaded once no
request can use them, and which versions the engine holds is what it reports (its ``/v1/models``
lists each adapter by name: a killed run's leftovers are found there, a restarted engine lists
none), never the folders on disk. Each engine's own routes are its adapter's :meth:`unload`.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from typing import Any


class AdapterVersions:
    """The versions whose adapters an engine holds, and the one served (mixed into an engine client)."""

    model: str

    def init_adapters(self) -> None:
        self.adapter: str | None = None
        """The adapter new requests name (the last pushed), None before the first adapter push."""
        self.adapters: set[int] = set()
        """The versions whose adapters the engine holds (pushed, or found by :meth:`find_adapters`)."""

    def adapter_name(self, version: int) -> str:
        return f"{self.model}-v{version}"

    def find_adapters(self, cards: list[dict[str, Any]]) -> None:
        """Take the adapters ``<model>-v<V>`` among the engine's ``/v1/models`` cards as held."""
        pattern = re.compile(re.escape(self.model) + r"-v(\d+)")
        self.adapters = {int(m.group(1)) for card in cards if (m := pattern.fullmatch(str(card.get("id"))))}
        if self.adapter is not None and self.adapter not in {self.adapter_name(v) for v in self.adapters}:
            self.adapter = None

    @abstractmethod
    def unload(self, name: str) -> bool:
        """Unload adapter ``name``; False when the engine does not hold it (no error)."""

    def held_versions(self) -> set[int]:
        return set(self.adapters)

    def retire_adapter(self, version: int) -> None:
        name = self.adapter_name(version)
        if name != self.adapter:
            self.unload(name)
            self.adapters.discard(version)

    def retire_adapters(self) -> None:
        for version in sorted(self.adapters):
            self.unload(self.adapter_name(version))
        self.adapters.clear()
        self.adapter = None
