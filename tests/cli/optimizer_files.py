"""The optimizer state of a ddp checkpoint and of a 2-process sharded one, for distributed_tests.sh's checks.

    whole, shards = load(DDP_OPTIMIZER_FILE, SHARDED_CHECKPOINT_DIR)
"""
import os
import sys

sys.path.insert(0, os.path.join(os.environ["TUNE_SOURCE"], "scripts"))
import safetensors_io  # noqa: E402


def load(whole_file, sharded_dir, ranks=2):
    whole = safetensors_io.load(whole_file)
    shards = [safetensors_io.load(os.path.join(sharded_dir, f"optimizer.rank-{r}-of-{ranks}.safetensors"))
              for r in range(ranks)]
    return whole, shards
