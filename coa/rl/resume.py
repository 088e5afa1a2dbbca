"""Exact resume of an RL run: a run killed after a checkpoint and resumed writes the same rollouts and
weights as one never killed, on one rank or many.

What decides a generation batch's samples, and how each comes back after a resume:

* **the prompts of the batch**: TRL's sampler draws them in a seeded order, an epoch at a time. Its
  generator was seeded once per process, so a run resumed in epoch 2 drew epoch 0's order again
  (measured before this module: 14 of 48 rollout rows differed after a resume at an epoch's end).
  :class:`EpochOrderSampler` seeds the order of each epoch from ``(seed, epoch)`` alone, so it is the
  same whether or not the run stopped before it; the position in the epoch is the global step
  (the trainer skips the batches already trained).
* **the random numbers of sampling**, per rank: the trainer's ``rng_state[_<rank>].pth`` in each
  checkpoint (python, numpy, torch), restored where the resumed loop starts.
* **dynamic sampling's refills**: drawn from a generator keyed by the seed, the step and the rank
  (:meth:`coa.rl.rollouts.RolloutSource.batch`), so nothing to save.
* **how many ranks drew them**: :data:`SAMPLING_STATE_FILE` in the checkpoint folder (written with
  the checkpoint, inside its staging folder, so atomic with it) records the rank count, the seed and
  the epoch; a run resumed on another rank count trains on (the plan is the same) but its rollouts
  cannot be the uninterrupted run's, which :func:`check_sampling_state` logs as a WARNING.

* **whether a refill round starts under a time budget**: decided from rank 0's clock on every rank
  (:func:`coa.rl.ranks.refill_decision`), so the ranks agree; a clock it stays: a resumed run whose
  deadline cuts a round at another step than the killed run's did draws other refills from there.
* **``rl.mode: async``**: the producer's cursor, its finished untrained groups and its running
  draws, in :data:`~coa.rl.producer.PRODUCER_STATE_FILE` beside the sampling state (same staging
  folder, same atomicity); a resumed producer queues the groups again, generates the running draws
  again and draws on from the cursor (:meth:`~coa.rl.producer.GroupProducer.restore`): no group
  lost or trained twice, the same prompts drawn. Not exact there, in a resumed run as between two
  uninterrupted ones: which finished group a step takes (the order groups finish in) and the
  weights a generation samples with (when the push lands), so the rows and the weights differ.

Not covered: a checkpoint inside a generation batch (``steps_per_generation`` > 1 with
``save_steps`` not a multiple of it): TRL's buffer of the batch's remaining steps is not saved.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import types
from pathlib import Path
from typing import Any

from trl.trainer.utils import RepeatSampler

log = logging.getLogger("coa.rl")

SAMPLING_STATE_FILE = "sampling_state.json"


def epoch_seed(seed: int, epoch: int) -> int:
    """The seed of the prompt order of ``epoch`` (epoch 0: ``seed`` itself, TRL's own first order)."""
    if epoch == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:epoch:{epoch}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & 0x7FFF_FFFF_FFFF_FFFF


class EpochOrderSampler(RepeatSampler):  # type: ignore[misc]
    """TRL's ``RepeatSampler`` whose shuffled order of an epoch depends on ``(seed, epoch)`` only.

    The epoch is set before each pass (``set_epoch``: accelerate's data loader forwards the trainer's
    epoch; :func:`install` also sets it at each epoch's begin, from the trainer state, which a resumed
    run loads from its checkpoint).
    """

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        if self.shuffle:
            self.generator.manual_seed(epoch_seed(int(self.seed or 0), self.epoch))


def install(trainer: Any) -> None:
    """Make ``trainer`` (TRL's ``GRPOTrainer``) resume exactly (see the module doc): its sampler keyed
    by the epoch, and the sampling state written into each checkpoint."""
    from transformers import TrainerCallback

    samplers: list[EpochOrderSampler] = []
    make_sampler = trainer._get_train_sampler
    save_rng = trainer._save_rng_state

    def get_train_sampler(self: Any, dataset: Any = None) -> EpochOrderSampler:
        base = make_sampler(dataset)
        sampler = EpochOrderSampler(
            data_source=base.data_source,
            mini_repeat_count=base.mini_repeat_count,
            batch_size=base.batch_size,
            repeat_count=base.repeat_count,
            shuffle=base.shuffle,
            seed=base.seed,
        )
        samplers.append(sampler)
        return sampler

    def save_rng_state(self: Any, output_dir: str) -> None:
        save_rng(output_dir)  # per rank, into the checkpoint's staging folder
        if self.args.should_save:
            write_sampling_state(Path(output_dir), self)
            write_producer_state(Path(output_dir), self)

    class _EpochBegin(TrainerCallback):  # type: ignore[misc]
        def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            for sampler in samplers:
                sampler.set_epoch(current_epoch(state.epoch))

    trainer._get_train_sampler = types.MethodType(get_train_sampler, trainer)
    trainer._save_rng_state = types.MethodType(save_rng_state, trainer)
    trainer.add_callback(_EpochBegin())


def current_epoch(progress: float | None) -> int:
    """The epoch a loop is in from the trainer state's ``epoch`` (epochs done, fractional)."""
    return int(math.floor((progress or 0.0) + 1e-9))


def sampling_state(trainer: Any) -> dict[str, Any]:
    """What the rollouts after a checkpoint depend on besides the weights and each rank's RNG."""
    return {
        "world_size": int(trainer.accelerator.num_processes),
        "seed": int(trainer.args.seed),
        "global_step": int(trainer.state.global_step),
        "epoch": current_epoch(trainer.state.epoch),
        "rng_files": "rng_state.pth" if trainer.accelerator.num_processes == 1 else "rng_state_<rank>.pth",
    }


def write_sampling_state(folder: Path, trainer: Any) -> None:
    """Write :data:`SAMPLING_STATE_FILE` into a checkpoint folder being written (rank 0)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SAMPLING_STATE_FILE).write_text(json.dumps(sampling_state(trainer), indent=2, sort_keys=True))


def write_producer_state(folder: Path, trainer: Any) -> None:
    """Write the async producer's state (if one runs) into a checkpoint folder being written."""
    from coa.rl.producer import PRODUCER_STATE_FILE

    producer = getattr(getattr(trainer, "coa_rollouts", None), "producer", None)
    if producer is not None:
        (folder / PRODUCER_STATE_FILE).write_text(json.dumps(producer.snapshot()))


def read_producer_state(checkpoint: Path) -> dict[str, Any] | None:
    """The async producer's state saved in ``checkpoint``; None (and a WARNING) when it holds none."""
    from coa.rl.producer import PRODUCER_STATE_FILE

    path = checkpoint / PRODUCER_STATE_FILE
    if not path.is_file():
        log.warning(
            "%s has no %s (written before async resume): the async producer starts afresh, its queued and "
            "running groups are generated again from the first prompts of its order",
            checkpoint,
            PRODUCER_STATE_FILE,
        )
        return None
    return dict(json.loads(path.read_text()))


def check_sampling_state(checkpoint: Path, world_size: int) -> None:
    """Log a WARNING when a resume cannot repeat the interrupted run's rollouts (another rank count,
    or a checkpoint written before sampling state was saved)."""
    path = checkpoint / SAMPLING_STATE_FILE
    if not path.is_file():
        log.warning(
            "%s has no %s (written before exact resume): the rollouts after this resume may differ from an "
            "uninterrupted run's",
            checkpoint,
            SAMPLING_STATE_FILE,
        )
        return
    saved = json.loads(path.read_text())
    if int(saved["world_size"]) != world_size:
        log.warning(
            "resuming on %d rank(s) from %s, written by %d: the run trains on to its plan, but each rank's "
            "prompts and random numbers differ from the interrupted run's, so its rollouts will too",
            world_size,
            checkpoint.name,
            saved["world_size"],
        )
