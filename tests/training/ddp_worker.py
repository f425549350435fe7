"""Run by the tests under torchrun: one DDP optimizer step on this rank's half of a fixed batch.

    python -m torch.distributed.run --nproc_per_node 2 tests/training/ddp_worker.py OUT_FILE
"""

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import fixed_batch, tiny_model_and_config  # noqa: E402

from transformer_min.core import distributed as dist_utils  # noqa: E402
from transformer_min.data.batch import Batch  # noqa: E402
from transformer_min.training.trainer import Trainer  # noqa: E402


def main(out: str) -> None:
    info = dist_utils.init_distributed("cpu")
    model, cfg = tiny_model_and_config()
    full = fixed_batch()
    half = full.src.size(0) // info.world_size
    rows = slice(info.rank * half, (info.rank + 1) * half)
    mine = Batch(full.src[rows], full.tgt_in[rows], full.tgt_out[rows])
    trainer = Trainer(cfg, model, source=None, run_dir=Path(out).parent, device=torch.device("cpu"), dist=info)
    trainer.train_step([mine])
    if info.is_main:
        torch.save({k: v.detach().clone() for k, v in trainer.model.state_dict().items()}, out)
    dist_utils.shutdown(info)


if __name__ == "__main__":
    main(sys.argv[1])
