"""The SFT recipe's trainer: TRL's ``SFTTrainer`` on a pre-tokenized dataset, built from a run config.

:func:`build_trainer` encodes the ``sft.v1`` rows (:mod:`coa.train.data`: ``input_ids`` and loss
``labels``, ``-100`` on the prompt and every observation), holds out whole tasks for a held-out
loss (:func:`split_heldout`, :class:`HeldoutLoss`), loads the model and returns the trainer with
the kit's callbacks (:mod:`coa.kit.callbacks`), not yet trained. :class:`CoaSFTTrainer`
counts the tokens it trains on, follows a time budget's plan in its schedule, and uses TRL's fused
LM head or the model's own loss (``fused_lm_head``); without the fused head, the LM head runs only at
the positions whose next token is trained (``head_positions``, :func:`trained_positions_loss`).

**Packing** (``packing: true``) uses TRL's best-fit-decreasing packing (``bfd``) of whole examples
(already cut to ``max_length``), which is padding-free: each packed row keeps the ``labels`` of its
examples, the collator concatenates the rows of a batch into one sequence with per-example
``position_ids`` (restarting at 0) and no attention mask, and the model derives a block-diagonal
causal mask from those position ids, so no example attends to another and no loss crosses a
boundary (the first label of each example is ``-100``). TRL's ``wrapped`` strategy cuts examples
mid-sequence and is not offered. Without flash-attention the block-diagonal mask is dense,
quadratic in ``batch_size * max_length``: on CPU packing is ~3x slower per token than plain padded
batches, so pack on GPUs only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from transformers import Trainer, TrainerCallback
from transformers.trainer_callback import PrinterCallback
from trl import SFTTrainer

from coa.format import IGNORE_INDEX
from coa.kit import fsdp, ranks
from coa.kit.budget import StepPlan, follow_plan
from coa.kit.callbacks import LogLastStep, LogToLogger, StepCounter
from coa.kit.lora import peft_config_of
from coa.kit.run import CHECKPOINTS_DIR
from coa.kit.tracking import tracking_args
from coa.train.config import SFT, SFTError, SFTRunConfig
from coa.train.data import EncodedExamples, encode_examples
from coa.train.kernels import apply_layer_kernels, liger_loss, resolve_liger

log = logging.getLogger(SFT.logger)


@dataclasses.dataclass
class BuiltTrainer:
    """A ready ``SFTTrainer`` and what went into it (see :func:`build_trainer`)."""

    trainer: Any
    encoded: EncodedExamples
    counter: StepCounter
    bf16: bool
    device: str
    n_heldout: int = 0


def build_trainer(
    examples: pa.Table,
    config: SFTRunConfig,
    output_dir: str | Path,
    max_steps: int | None = None,
    callbacks: Sequence[Any] = (),
) -> BuiltTrainer:
    """The ``SFTTrainer`` of a run (dataset encoded and, with packing, packed), not yet trained."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig

    cuda = torch.cuda.is_available()
    bf16 = bool(cuda and torch.cuda.is_bf16_supported()) if config.bf16 == "auto" else bool(config.bf16)
    fused_lm_head = cuda if config.fused_lm_head == "auto" else config.fused_lm_head
    liger = resolve_liger(config.liger_kernel, cuda)
    if liger and config.lora is not None:
        log.info("sft.liger_kernel: off with LoRA (the adapters wrap the layers Liger would replace)")
        liger = False
    scheduler: str = config.lr_scheduler
    scheduler_kwargs: dict[str, Any] = {}
    if scheduler == "cosine" and config.min_lr_ratio > 0:
        scheduler, scheduler_kwargs = "cosine_with_min_lr", {"min_lr_rate": config.min_lr_ratio}
    batch = rank_batch(config)
    if fsdp.cpu_fsdp2_requested():
        fsdp.check_supported(SFT.name, SFTError, config.lora is not None, config.time_budget_s is not None)
    # The arguments come first: under DeepSpeed ZeRO-3 they make from_pretrained load the weights sharded.
    args = SFTConfig(
        output_dir=str(Path(output_dir) / CHECKPOINTS_DIR),
        max_steps=max_steps or config.max_steps or 1,
        per_device_train_batch_size=batch.per_rank,
        gradient_accumulation_steps=batch.accumulation,
        learning_rate=config.learning_rate,
        lr_scheduler_type=scheduler,
        lr_scheduler_kwargs=scheduler_kwargs,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        adam_beta1=config.adam_beta1,
        adam_beta2=config.adam_beta2,
        max_grad_norm=config.max_grad_norm,
        max_length=config.max_length,
        packing=config.packing,
        train_sampling_strategy=config.sampling,
        packing_strategy="bfd",  # whole examples; never "wrapped", which cuts them mid-sequence
        activation_checkpointing=config.gradient_checkpointing,
        bf16=bf16,
        fp16=False,
        use_cpu=not cuda,
        deepspeed=config.deepspeed,
        seed=config.seed,
        data_seed=config.seed,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        save_only_model=fsdp.cpu_fsdp2_requested(),  # FSDP2 on CPU: no optimizer checkpoint (kit.fsdp)
        logging_strategy="steps",
        logging_steps=config.logging_steps,
        logging_first_step=True,
        include_num_input_tokens_seen="non_padding",
        **tracking_args(SFT, config, Path(output_dir)),
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    if config.packing and config.attn_implementation in ("sdpa", "eager"):
        log.warning(
            "packing with %s attention: each batch is one sequence with a dense block-diagonal mask, "
            "quadratic in batch_size * max_length (measured 3x slower per token than unpacked on CPU); "
            "on a GPU pack with flex_attention (PyTorch's block-sparse mask) or flash_attention_2",
            config.attn_implementation,
        )
    tokenizer = AutoTokenizer.from_pretrained(config.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    train_rows, heldout_rows = split_heldout(examples, config.heldout_fraction, config.heldout_max_examples)
    if absent := sorted(set(config.repeat) - set(train_rows.column("family").to_pylist())):
        log.info("sft.repeat names %s, which this data has no example of: nothing repeated for it", absent)
    encoded = encode_examples(train_rows, tokenizer, config.max_length, config.repeat)
    heldout = encode_examples(heldout_rows, tokenizer, config.max_length) if heldout_rows.num_rows else None
    model = AutoModelForCausalLM.from_pretrained(
        config.base_model, dtype=torch.float32, attn_implementation=config.attn_implementation
    )
    if liger:
        apply_layer_kernels(model)
    peft_config = peft_config_of(config.lora, SFTError) if config.lora is not None else None
    counter = StepCounter()
    trainer = CoaSFTTrainer(
        model=model,
        args=args,
        train_dataset=Dataset.from_dict(encoded.as_columns()),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=[counter, LogLastStep(), LogToLogger(SFT.logger), *callbacks],
    )
    trainer.remove_callback(PrinterCallback)  # logs go to the `coa.train.sft` logger instead
    if fsdp.cpu_fsdp2_requested():  # accelerate's FSDP takes on GPUs only: shard here (coa.kit.fsdp)
        fsdp.install(trainer)
    log_rank(trainer, batch)
    trainer.coa_fused_lm_head = fused_lm_head
    trainer.coa_trained_positions_head = config.head_positions == "trained" and peft_config is None
    trainer.coa_liger = liger
    if heldout is not None and heldout.input_ids:
        trainer.add_callback(HeldoutLoss(trainer, heldout, config.eval_steps, config.batch_size))
    n_heldout = len(heldout.input_ids) if heldout is not None else 0
    return BuiltTrainer(trainer, encoded, counter, bf16, str(args.device), n_heldout)


def rank_batch(config: SFTRunConfig) -> ranks.RankBatch:
    """This rank's share of the run's global batch (``batch_size * grad_accumulation``); :class:`SFTError`
    when the ranks cannot share it."""
    try:
        return ranks.split_batch(config.batch_size, config.grad_accumulation, ranks.world_size())
    except ValueError as e:
        raise SFTError(str(e)) from None


def log_rank(trainer: Any, batch: ranks.RankBatch) -> None:
    """One line per rank (so a launched run shows its ranks are real): rank, world size, pid, how the
    ranks run (accelerate's distributed type) and the batch; for a model sharded by FSDP2 on CPU ranks
    (:mod:`coa.kit.fsdp`) or by ZeRO-3 a second line with what this rank holds of it; a warning
    when an FSDP config did not take (FSDP1 on CPU: accelerate enables FSDP on accelerators only, the
    ranks run plain DDP)."""
    kind = str(getattr(trainer.accelerator.distributed_type, "value", trainer.accelerator.distributed_type))
    log.info("rank %d of %d (pid %d, %s): %s", ranks.rank(), batch.world_size, os.getpid(), kind,
             batch.describe())  # fmt: skip
    if shards := fsdp.describe_shards(trainer):
        log.info("rank %d %s", ranks.rank(), shards)
    elif os.environ.get("ACCELERATE_USE_FSDP", "").lower() == "true" and kind != "FSDP":
        log.warning(
            "the accelerate config asks for FSDP but this run is %s: accelerate shards with FSDP on GPUs "
            "only, so these ranks each hold the whole model (plain data parallelism)",
            kind,
        )


def split_heldout(examples: pa.Table, fraction: float, max_examples: int) -> tuple[pa.Table, pa.Table]:
    """``(train, held-out)``: whole tasks, in the order of a hash of their id, until the held-out set
    holds ``fraction`` of the examples (at most ``max_examples``; at least one when ``fraction > 0``
    and two or more tasks). Deterministic, so a resumed run holds out the same examples."""
    import hashlib

    import pyarrow.compute as pc

    task_ids = examples.column("task_id").to_pylist()
    tasks = sorted(set(task_ids), key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    target = min(max_examples, round(fraction * len(task_ids)))
    if fraction > 0 and len(tasks) > 1:
        target = max(target, 1)
    per_task = {t: task_ids.count(t) for t in tasks} if target else {}
    chosen: set[str] = set()
    taken = 0
    for task in tasks[:-1]:  # the last task always trains
        if taken >= target:
            break
        chosen.add(task)
        taken += per_task[task]
    mask = pc.is_in(examples.column("task_id"), pa.array(sorted(chosen), pa.string()))
    return examples.filter(pc.invert(mask)), examples.filter(mask)


class CoaSFTTrainer(SFTTrainer):
    """``SFTTrainer`` that counts the tokens it trains on (labels other than -100); fused head optional.

    Without the fused LM head (``coa_fused_lm_head`` false) the loss is the model's own causal-LM
    loss over the same labels (no entropy / token-accuracy metrics): with
    ``coa_trained_positions_head`` (full fine-tuning, one process) computed by
    :func:`trained_positions_loss`, else by ``transformers.Trainer``. With ``coa_liger`` (CUDA, Liger
    installed: :func:`coa.train.kernels.resolve_liger`) the same loss by Liger's fused linear
    cross-entropy (:func:`coa.train.kernels.liger_loss`), under the same conditions.
    """

    coa_trained_tokens: Any = 0  # a device tensor once counting starts (no host sync per step)
    coa_step_tokens: list[int] | None = None  # calibration: computed tokens added to the last entry
    coa_fused_lm_head: bool = True
    coa_trained_positions_head: bool = False
    coa_liger: bool = False  # Liger's fused linear cross-entropy at the trained positions (CUDA)
    coa_step_plan: StepPlan | None = None  # a time budget's plan: the schedule follows it

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        """``group_by_length`` over the global batch (``transformers`` groups by one rank's share), so
        the example order, which the ranks then share batch by batch, is the same on any number of
        ranks: N ranks train on the examples one process would, step for step."""
        if self.args.train_sampling_strategy != "group_by_length":
            return super()._get_train_sampler(train_dataset)
        from transformers.trainer_pt_utils import LengthGroupedSampler

        dataset = train_dataset if train_dataset is not None else self.train_dataset
        step_batch = self.args.train_batch_size * self.args.gradient_accumulation_steps
        return LengthGroupedSampler(step_batch * max(1, self.args.world_size), dataset=dataset)

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        created = self.lr_scheduler is None
        scheduler = super().create_scheduler(num_training_steps, optimizer)
        if created and self.coa_step_plan is not None:
            if not hasattr(scheduler, "lr_lambdas"):
                raise SFTError(f"a time budget needs a LambdaLR schedule, got {type(scheduler).__name__}")
            warmup = self.args.get_warmup_steps(num_training_steps)
            follow_plan(scheduler, self.coa_step_plan, num_training_steps, warmup)
        return scheduler

    def compute_loss(self, model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        if model.training and "labels" in inputs:
            self.coa_trained_tokens = self.coa_trained_tokens + (inputs["labels"][..., 1:] != -100).sum()
            if self.coa_step_tokens is not None:
                self.coa_step_tokens[-1] += int(inputs["labels"].numel())
        if self.coa_liger and self._own_loss(model, inputs, args, kwargs):
            return liger_loss(model, inputs, kwargs.get("num_items_in_batch"))
        if not self.coa_fused_lm_head:
            if self.coa_trained_positions_head and self._own_loss(model, inputs, args, kwargs):
                return trained_positions_loss(model, inputs, kwargs.get("num_items_in_batch"))
            return Trainer.compute_loss(self, model, inputs, *args, **kwargs)
        return super().compute_loss(model, inputs, *args, **kwargs)

    def _own_loss(
        self, model: Any, inputs: dict[str, Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> bool:
        """Whether this step's loss may be computed here instead of by TRL or ``transformers``: a training
        step of a full fine-tune in one process, with labels, whose loss the Trainer leaves unscaled."""
        return bool(
            model.training
            and "labels" in inputs
            and not args
            and not kwargs.get("return_outputs")
            and self.accelerator.num_processes == 1
            and self.model_accepts_loss_kwargs  # the Trainer then leaves its scale as it is
            and hasattr(model, "lm_head")
            and hasattr(model, "model")
        )


def trained_positions_loss(model: Any, inputs: dict[str, Any], num_items_in_batch: Any = None) -> Any:
    """The causal-LM loss of ``inputs`` with the LM head applied only where a label is trained.

    Equal to the model's own loss (``model(**inputs).loss``: the labels shifted by one, ``-100``
    ignored, summed over ``num_items_in_batch`` when given, else averaged): a position whose next token
    is ``-100`` adds nothing to it, so its logits (a ``vocab_size``-wide projection and softmax, in
    forward and backward) are never computed. The decoder runs as usual (``model.model``).
    """
    labels = inputs["labels"]
    features = {k: v for k, v in inputs.items() if k != "labels"}
    features["use_cache"] = False  # a cache turns off the model's packed-sequence (block-diagonal) mask
    hidden = model.model(**features).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    trained = targets != IGNORE_INDEX
    logits = model.lm_head(hidden[trained])
    return model.loss_function(
        logits=logits,
        labels=None,
        vocab_size=logits.shape[-1],
        num_items_in_batch=num_items_in_batch,
        shift_labels=targets[trained],
    )


class HeldoutLoss(TrainerCallback):
    """Every ``every`` optimizer steps (and at the last), the mean loss per trained token on the
    held-out examples, appended to the trainer's log history (so it survives a resume).

    The examples are batched in order of length (``batch_size`` at a time), so a batch pads to a
    length close to its own examples' instead of to the longest of a random four: the loss is a sum
    over trained tokens, which the order does not change. The pass runs under ``no_grad`` in eval
    mode and draws no random numbers, so how often it runs does not change the trained weights.
    """

    def __init__(self, trainer: Any, heldout: EncodedExamples, every: int, batch_size: int) -> None:
        self.trainer, self.heldout, self.every, self.batch_size = trainer, heldout, every, batch_size
        order = sorted(range(len(heldout.input_ids)), key=lambda i: len(heldout.input_ids[i]))
        self.batches = [order[start : start + batch_size] for start in range(0, len(order), batch_size)]

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step % self.every and state.global_step < state.max_steps:
            return
        loss = self.loss()
        state.log_history.append({"step": state.global_step, "heldout_loss": round(loss, 6)})
        log.info("step %d held-out loss %.4f", state.global_step, loss)

    def loss(self) -> float:
        import torch

        model = self.trainer.model
        was_training = model.training
        model.eval()
        pad = self.trainer.processing_class.pad_token_id or 0
        total, count = 0.0, 0
        with torch.no_grad():
            for indices in self.batches:
                ids = [self.heldout.input_ids[i] for i in indices]
                labels = [self.heldout.labels[i] for i in indices]
                width = max(len(x) for x in ids)
                batch = torch.tensor([x + [pad] * (width - len(x)) for x in ids], device=model.device)
                target = torch.tensor([y + [-100] * (width - len(y)) for y in labels], device=model.device)
                mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids], device=model.device)
                logits = model(input_ids=batch, attention_mask=mask).logits[:, :-1].float()
                shifted = target[:, 1:]
                losses = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]),
                    shifted.reshape(-1),
                    ignore_index=-100,
                    reduction="sum",
                )
                total += float(losses)
                count += int((shifted != -100).sum())
        if was_training:
            model.train()
        return total / max(1, count)
