"""Spotline: priority-based, checkpoint-aware scheduling of training jobs on elastic GPUs."""
