"""Spotline for training frameworks: checkpoint on a Spotline request, a Spot notice or SIGTERM
with the framework's own checkpoint, and resume exactly.

- `spotline.integrations.lightning`: `SpotlineCallback`, Lightning (`spotline[lightning]`);
- `spotline.integrations.transformers`: `SpotlineTrainerCallback`, Hugging Face `Trainer`
  (`spotline[transformers]`);
- `spotline.integrations.torch`: `DistributedCheckpointer`, plain PyTorch, torchrun DDP and FSDP2
  (`spotline[torch]`);
- `spotline.integrations.deepspeed`: `DeepSpeedCheckpointer`, DeepSpeed's own checkpoint
  (`spotline[deepspeed]`);
- `spotline.integrations.data`: `ResumableDataLoader`, shuffled data that resumes mid-epoch;
- `spotline.integrations.elastic`: an elastic job's size and the gradient accumulation that keeps
  its global batch at every size.

Each module imports its framework only when it is imported itself; `spotline.integrations`
alone imports none.
"""
