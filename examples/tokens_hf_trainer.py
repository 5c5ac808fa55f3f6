"""HF ``Trainer`` on token sequences, in ``DataCollatorWithFlattening``'s layout; exact resume.

A tiny Llama built from a config (no download) trains on ``TokenSequences`` of a uint16
``.bin`` corpus (documents end with token 0). Each batch of ``B`` sequences of ``L`` tokens
is flattened into one row of ``B L`` tokens as ``DataCollatorWithFlattening`` does:
``position_ids`` restart at every document piece, so transformers masks attention
block-diagonally (with FlashAttention, ``cu_seq_lens_q``/``_k`` do it) provided the config
has ``use_cache=False`` (transformers 5.24 builds a cache by default, even in training, and
then masks causally across documents without a word), and the loss takes
our already-shifted labels as ``shift_labels`` (``-100`` where a target would cross a
document). The loader's state rides in each checkpoint folder, as in
examples/hf_trainer_train.py::

    torchrun --nproc_per_node=2 examples/tokens_hf_trainer.py --corpus train.bin --out run \\
        --max-steps 6
    torchrun --nproc_per_node=2 examples/tokens_hf_trainer.py --corpus train.bin --out run \\
        --max-steps 6 --resume run/checkpoint-3

Each rank appends its flattened batches to ``<out>/tokens-rank<r>.jsonl``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

from detsamplers.loader import DataLoader
from detsamplers.tokens import TokenCorpus, TokenSequences, collate_tokens


def flatten(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Sequences as one flattened row, in ``DataCollatorWithFlattening``'s keys."""
    batch = collate_tokens(samples)
    cu = batch["cu_seqlens"]  # offsets of the pieces over the flattened batch, int32
    longest = int((cu[1:] - cu[:-1]).max())
    labels = batch["labels"].reshape(1, -1)
    return {
        "input_ids": batch["input_ids"].reshape(1, -1),
        "position_ids": batch["position_ids"].reshape(1, -1),
        "labels": labels,
        "shift_labels": labels,  # already shifted, -100 across documents: not shifted again
        "cu_seq_lens_q": cu,
        "cu_seq_lens_k": cu,
        "max_length_q": longest,
        "max_length_k": longest,
    }


def tiny_llama(seq_len: int) -> LlamaConfig:
    """A Llama of two narrow layers (about 23 thousand parameters), built without download."""
    return LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=seq_len,
        attn_implementation="sdpa",
        use_cache=False,  # with a cache, transformers ignores the packed position_ids
    )  # fmt: skip


class Recorded(LlamaForCausalLM):
    """The model, writing each flattened batch it trains on to a file (for the tests)."""

    records: Path | None = None
    step = 0

    def forward(self, **inputs: Any) -> Any:
        if self.records is not None and self.training:
            keys = ("input_ids", "position_ids", "shift_labels")
            row = {"step": self.step, **{key: inputs[key].tolist() for key in keys}}
            with open(self.records, "a") as f:
                f.write(json.dumps(row) + "\n")
        return super().forward(**inputs)


class LoaderState(TrainerCallback):
    """Write the loader's state into each checkpoint folder (rank 0's resumes every rank)."""

    def __init__(self, loader: Any, model: Recorded) -> None:
        self.loader = loader
        self.model = model

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.model.step = state.global_step

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            (folder / "loader.json").write_text(json.dumps(self.loader.state_dict()))


class LoaderTrainer(Trainer):
    def __init__(self, *args: Any, train_loader: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.train_loader = train_loader

    def get_train_dataloader(self) -> Any:
        return self.train_loader  # already split by process: not prepared again


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--corpus", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-steps", type=int, required=True)
    parser.add_argument("--checkpoint-every", type=int, default=3)
    parser.add_argument("--seq-len", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=2, help="sequences per process")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--resume", default=None, help="a checkpoint-<step> folder")
    args = parser.parse_args(argv)

    training = TrainingArguments(
        output_dir=str(args.out),
        max_steps=args.max_steps,
        save_strategy="steps",
        save_steps=args.checkpoint_every,
        logging_strategy="no",
        report_to=[],
        use_cpu=True,
        ignore_data_skip=True,  # the loader resumes itself, in O(1)
        learning_rate=1e-3,
        ddp_find_unused_parameters=False,
        seed=1,
    )
    corpus = TokenCorpus(args.corpus, dtype="uint16", eod_id=0, vocab_size=64, progress=False)
    sequences = TokenSequences(corpus, args.seq_len, mode="concat", seed=1)
    data = DataLoader(sequences, batch_size=args.batch_size, shuffle=True, seed=1,
                      num_workers=args.num_workers, collate_fn=flatten)  # fmt: skip
    train = data.get_data_loader(
        repeat=True, num_replicas=training.world_size, rank=training.process_index
    )
    if args.resume:
        train.load_state_dict(json.loads((Path(args.resume) / "loader.json").read_text()))
    args.out.mkdir(parents=True, exist_ok=True)
    config = tiny_llama(args.seq_len)
    torch.manual_seed(0)
    model = Recorded(config)
    model.records = args.out / f"tokens-rank{training.process_index}.jsonl"
    trainer = LoaderTrainer(
        model=model, args=training, train_loader=train, callbacks=[LoaderState(train, model)]
    )
    trainer.train(resume_from_checkpoint=args.resume)


if __name__ == "__main__":
    main()
