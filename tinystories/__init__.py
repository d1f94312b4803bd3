"""Train the course's modern decoder on TinyStories: `python -m tinystories train --config cpu_demo`.

The model is the notebooks' own code (``tinystories.course``, exported from solutions/), or a
student's finished notebook 08 with ``--model course``. The same command scales from a laptop CPU
(``cpu_demo``) to one GPU (``gpu_h100``, ``gpu_t4``) and to several with
``torchrun --nproc_per_node=N -m tinystories train``.
"""
