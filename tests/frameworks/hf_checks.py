"""The HF recipe's Trainer on 2 real processes refuses the Trainer's own skip, naming the fix.

Run by tests/frameworks/run_twice.py (``--checks``) on every rank before the example's
first run; ``check`` raises on any failure (the launch then fails), and writes
``hf-checks-rank<r>.json`` when all passed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from detsamplers.loader import DataLoader

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "hf_trainer_train.py"


def check(out: Path) -> None:
    from transformers import TrainingArguments  # here: collecting this module imports nothing

    spec = importlib.util.spec_from_file_location("hf_trainer_train", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    sys.modules["hf_trainer_train"] = example
    spec.loader.exec_module(example)
    out.mkdir(parents=True, exist_ok=True)
    args = TrainingArguments(output_dir=str(out / "refused"), use_cpu=True, report_to=[])
    train = DataLoader(range(16), batch_size=2).get_data_loader(
        repeat=True, num_replicas=args.world_size, rank=args.process_index
    )
    model = example.Model(out / "refused.jsonl")
    try:
        example.LoaderTrainer(model=model, args=args, train_loader=train)
    except ValueError as error:
        assert "ignore_data_skip=True" in str(error), error
        refused = str(error)
    else:
        raise AssertionError("LoaderTrainer accepted ignore_data_skip=False")
    rank = os.environ["RANK"]
    (out / f"hf-checks-rank{rank}.json").write_text(json.dumps({"refused": refused}))
