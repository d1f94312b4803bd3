"""Train the course's decoder on TinyStories: ``python -m tinystories train`` (see README)."""
